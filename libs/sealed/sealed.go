// Package sealed seals small secrets (cloud credentials) with AES-256-GCM
// so they can travel over NATS and rest in KV without being readable: the
// api-gateway seals what operators send, lifecycle stores the opaque blob,
// and the cloud-adapter opens it. Both ends load the same 32-byte key from
// a file (base64); the key id, a short SHA-256 prefix of the key, travels
// beside the blob so a key mismatch is reported as such rather than as a
// corrupt blob.
//
// The associated data binds a blob to its owner (the account name): a blob
// copied to another account does not open.
package sealed

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// KeySize is the size of a key in bytes (AES-256).
const KeySize = 32

// version prefixes every blob, so the format can change later.
const version byte = 1

// Errors of Open; test with errors.Is.
var (
	// ErrKeyMismatch: the blob was sealed under another key.
	ErrKeyMismatch = errors.New("sealed with a different key")
	// ErrCorrupt: the blob is malformed, was tampered with, or belongs to
	// another owner (associated data).
	ErrCorrupt = errors.New("sealed data is corrupt or belongs to another owner")
)

// Key seals and opens blobs. It never prints its bytes.
type Key struct {
	aead cipher.AEAD
	id   string
}

// NewKey returns a key from KeySize raw bytes.
func NewKey(raw []byte) (*Key, error) {
	if len(raw) != KeySize {
		return nil, fmt.Errorf("a sealing key must be %d bytes, got %d", KeySize, len(raw))
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, fmt.Errorf("creating cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("creating GCM: %w", err)
	}
	sum := sha256.Sum256(raw)
	return &Key{aead: aead, id: hex.EncodeToString(sum[:4])}, nil
}

// ParseKey decodes a base64 (standard or URL alphabet, padding optional)
// key; surrounding whitespace is ignored.
func ParseKey(text string) (*Key, error) {
	s := strings.TrimSpace(text)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if raw, err := enc.DecodeString(s); err == nil {
			return NewKey(raw)
		}
	}
	// Never echo the text: it is the key (or close to it).
	return nil, errors.New("a sealing key must be base64 of 32 random bytes")
}

// LoadKeyFile reads a key file (base64 of KeySize bytes).
func LoadKeyFile(path string) (*Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading secrets key file: %w", err)
	}
	k, err := ParseKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("secrets key file %s: %w", path, err)
	}
	return k, nil
}

// GenerateKeyFile writes a new random key to path (mode 0600, parent
// directories created) unless the file exists; either way it returns the
// key in the file.
func GenerateKeyFile(path string) (*Key, error) {
	if _, err := os.Stat(path); err == nil {
		return LoadKeyFile(path)
	}
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("generating a secrets key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating the secrets key directory: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(base64.StdEncoding.EncodeToString(raw)+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("writing the secrets key: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("writing the secrets key: %w", err)
	}
	return NewKey(raw)
}

// ID identifies the key without revealing it.
func (k *Key) ID() string { return k.id }

// String hides the key.
func (k *Key) String() string { return "sealed.Key(" + k.id + ")" }

// Seal encrypts plaintext bound to aad (the owner's name).
func (k *Key) Seal(plaintext, aad []byte) ([]byte, error) {
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("sealing: %w", err)
	}
	out := make([]byte, 0, 1+len(nonce)+len(plaintext)+k.aead.Overhead())
	out = append(out, version)
	out = append(out, nonce...)
	return k.aead.Seal(out, nonce, plaintext, aad), nil
}

// Open decrypts a blob sealed under the key with id keyID and bound to
// aad. An empty keyID skips the id check.
func (k *Key) Open(blob []byte, keyID string, aad []byte) ([]byte, error) {
	if keyID != "" && keyID != k.id {
		return nil, fmt.Errorf("%w: sealed under key %s, this key is %s", ErrKeyMismatch, keyID, k.id)
	}
	ns := k.aead.NonceSize()
	if len(blob) < 1+ns+k.aead.Overhead() || blob[0] != version {
		return nil, ErrCorrupt
	}
	pt, err := k.aead.Open(nil, blob[1:1+ns], blob[1+ns:], aad)
	if err != nil {
		return nil, ErrCorrupt
	}
	return pt, nil
}

// Credentials are a cloud account's API key as sealed for the catalog.
// String and GoString hide the secret values.
type Credentials struct {
	SecretID  string `json:"secretId"`
	SecretKey string `json:"secretKey"`
	// Token is an optional session token.
	Token string `json:"token,omitempty"`
}

func (Credentials) String() string   { return "[redacted]" }
func (Credentials) GoString() string { return "[redacted]" }

// SealCredentials seals c for account.
func (k *Key) SealCredentials(account string, c Credentials) ([]byte, error) {
	if c.SecretID == "" || c.SecretKey == "" {
		return nil, errors.New("credentials need a secretId and a secretKey")
	}
	pt, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encoding credentials: %w", err)
	}
	return k.Seal(pt, []byte(account))
}

// OpenCredentials opens credentials sealed for account under keyID.
func (k *Key) OpenCredentials(account string, blob []byte, keyID string) (Credentials, error) {
	pt, err := k.Open(blob, keyID, []byte(account))
	if err != nil {
		return Credentials{}, fmt.Errorf("opening the credentials of account %q: %w", account, err)
	}
	var c Credentials
	if err := json.Unmarshal(pt, &c); err != nil || c.SecretID == "" || c.SecretKey == "" {
		return Credentials{}, fmt.Errorf("opening the credentials of account %q: %w", account, ErrCorrupt)
	}
	return c, nil
}
