// Package sealed seals small secrets (cloud credentials, hook environment
// values, template secret parameters) with AES-256-GCM
// so they can travel over NATS and rest in KV without being readable: the
// api-gateway seals what operators send, lifecycle stores the opaque blob,
// and the cloud-adapter opens it. Every service loads the same key ring
// from a file: one base64 32-byte key per line, the first seals and every
// key opens, so a key can be rotated (see token.go for values sealed in
// place and the README for the procedure); the key id, a short SHA-256 prefix of the key, travels
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

	"github.com/nodesmith/nodesmith/libs/cloudspec"
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

// aeadKey is one AES-256-GCM key and its id.
type aeadKey struct {
	aead cipher.AEAD
	id   string
	// revoked: the key was published (see revoked); it may open, never seal.
	revoked bool
}

// Key is a key ring: the first key seals, any key of the ring opens (the
// key id travels with every blob). A ring of one key is what NewKey and
// ParseKey return. It never prints its bytes.
type Key struct {
	keys []aeadKey
}

// ErrRevokedKey: the key is one that was once published (the placeholder
// committed in deploy/kustomize before issue 15) and must never seal.
var ErrRevokedKey = errors.New("this sealing key was published in the nodesmith repository and is refused: generate your own")

// revoked are SHA-256 hashes of the raw bytes of keys that were published
// and so protect nothing. The keys themselves are not kept anywhere.
var revoked = map[string]bool{
	// deploy/kustomize/components/secrets/files/nodesmith-secrets-key/key
	// as committed until issue 15.
	"f3e16d80437462a4169caa045404fae2ddaf30ae829e1fe339bb5ce22f75ba7d": true,
}

// GenerateHint tells an operator how to make a key file.
const GenerateHint = "generate one with `head -c 32 /dev/urandom | base64` (or `make secrets` for a cluster install); the file holds one base64 key per line, the first one seals"

func newAEADKey(raw []byte) (aeadKey, error) {
	if len(raw) != KeySize {
		return aeadKey{}, fmt.Errorf("a sealing key must be %d bytes, got %d", KeySize, len(raw))
	}
	sum := sha256.Sum256(raw)
	block, err := aes.NewCipher(raw)
	if err != nil {
		return aeadKey{}, fmt.Errorf("creating cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return aeadKey{}, fmt.Errorf("creating GCM: %w", err)
	}
	return aeadKey{aead: aead, id: hex.EncodeToString(sum[:4]), revoked: revoked[hex.EncodeToString(sum[:])]}, nil
}

// sealingKeyUsable refuses a ring whose sealing (first) key was published.
// A published key may stay listed after it, to open what it sealed until
// lifecycle has re-sealed everything under the first key: the way off it.
func (k *Key) sealingKeyUsable() error {
	if k.keys[0].revoked {
		return ErrRevokedKey
	}
	return nil
}

// NewKey returns a ring of one key from KeySize raw bytes.
func NewKey(raw []byte) (*Key, error) {
	k, err := newAEADKey(raw)
	if err != nil {
		return nil, err
	}
	r := &Key{keys: []aeadKey{k}}
	if err := r.sealingKeyUsable(); err != nil {
		return nil, err
	}
	return r, nil
}

// NewRing returns a ring of the given keys; the first seals.
func NewRing(keys ...*Key) (*Key, error) {
	r := &Key{}
	seen := map[string]bool{}
	for _, k := range keys {
		for _, ak := range k.keys {
			if !seen[ak.id] {
				seen[ak.id] = true
				r.keys = append(r.keys, ak)
			}
		}
	}
	if len(r.keys) == 0 {
		return nil, errors.New("a key ring needs at least one key")
	}
	if err := r.sealingKeyUsable(); err != nil {
		return nil, err
	}
	return r, nil
}

func decodeKey(s string) ([]byte, bool) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if raw, err := enc.DecodeString(s); err == nil {
			return raw, true
		}
	}
	return nil, false
}

// ParseKey decodes a key ring: one base64 (standard or URL alphabet,
// padding optional) key per line; blank lines and lines starting with #
// are ignored; surrounding whitespace is ignored. The first key seals.
func ParseKey(text string) (*Key, error) {
	r := &Key{}
	seen := map[string]bool{}
	for i, line := range strings.Split(text, "\n") {
		s := strings.TrimSpace(line)
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		raw, ok := decodeKey(s)
		if !ok {
			// Never echo the text: it is the key (or close to it).
			return nil, fmt.Errorf("line %d: a sealing key must be base64 of 32 random bytes", i+1)
		}
		k, err := newAEADKey(raw)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		if !seen[k.id] {
			seen[k.id] = true
			r.keys = append(r.keys, k)
		}
	}
	if len(r.keys) == 0 {
		return nil, errors.New("no sealing key: a sealing key must be base64 of 32 random bytes")
	}
	if err := r.sealingKeyUsable(); err != nil {
		return nil, fmt.Errorf("the first key (the one that seals): %w", err)
	}
	return r, nil
}

// LoadKeyFile reads a key ring file (one base64 key of KeySize bytes per
// line; the first seals). Errors say how to generate a key.
func LoadKeyFile(path string) (*Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading secrets key file: %w; %s", err, GenerateHint)
	}
	k, err := ParseKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("secrets key file %s: %w; %s", path, err, GenerateHint)
	}
	return k, nil
}

// NewRawKey returns KeySize random bytes, base64 encoded (a key file line).
func NewRawKey() (string, error) {
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("generating a secrets key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(raw), nil
}

// GenerateKeyFile writes a new random key to path (mode 0600, parent
// directories created) unless the file exists; either way it returns the
// key in the file.
func GenerateKeyFile(path string) (*Key, error) {
	if _, err := os.Stat(path); err == nil {
		return LoadKeyFile(path)
	}
	line, err := NewRawKey()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating the secrets key directory: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(line+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("writing the secrets key: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("writing the secrets key: %w", err)
	}
	return ParseKey(line)
}

// ID identifies the sealing (first) key without revealing it.
func (k *Key) ID() string { return k.keys[0].id }

// IDs are the ids of every key of the ring, the sealing key first.
func (k *Key) IDs() []string {
	ids := make([]string, len(k.keys))
	for i, ak := range k.keys {
		ids[i] = ak.id
	}
	return ids
}

// Has reports whether the ring holds the key with id.
func (k *Key) Has(id string) bool {
	for _, ak := range k.keys {
		if ak.id == id {
			return true
		}
	}
	return false
}

// String hides the key.
func (k *Key) String() string { return "sealed.Key(" + strings.Join(k.IDs(), ",") + ")" }

// Seal encrypts plaintext bound to aad (the owner's name) under the first
// key of the ring.
func (k *Key) Seal(plaintext, aad []byte) ([]byte, error) {
	sk := k.keys[0]
	nonce := make([]byte, sk.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("sealing: %w", err)
	}
	out := make([]byte, 0, 1+len(nonce)+len(plaintext)+sk.aead.Overhead())
	out = append(out, version)
	out = append(out, nonce...)
	return sk.aead.Seal(out, nonce, plaintext, aad), nil
}

// Open decrypts a blob sealed under the key with id keyID and bound to
// aad, with that key of the ring. An empty keyID tries every key.
func (k *Key) Open(blob []byte, keyID string, aad []byte) ([]byte, error) {
	if keyID != "" && !k.Has(keyID) {
		return nil, fmt.Errorf("%w: sealed under key %s, this key ring holds %s", ErrKeyMismatch, keyID, strings.Join(k.IDs(), ","))
	}
	for _, ak := range k.keys {
		if keyID != "" && ak.id != keyID {
			continue
		}
		ns := ak.aead.NonceSize()
		if len(blob) < 1+ns+ak.aead.Overhead() || blob[0] != version {
			return nil, ErrCorrupt
		}
		if pt, err := ak.aead.Open(nil, blob[1:1+ns], blob[1+ns:], aad); err == nil {
			return pt, nil
		}
	}
	return nil, ErrCorrupt
}

// Credentials are a cloud account's API key (libs/cloudspec): the catalog
// holds them sealed. String and GoString hide the secret values.
type Credentials = cloudspec.Credentials

// sealedCredentials is the sealed plaintext: its JSON names predate the
// neutral field names and stay, so stored credentials keep opening.
type sealedCredentials struct {
	KeyID         string `json:"secretId"`
	Secret        string `json:"secretKey"`
	SecurityToken string `json:"token,omitempty"`
}

// SealCredentials seals c for account.
func (k *Key) SealCredentials(account string, c Credentials) ([]byte, error) {
	if !c.Valid() {
		return nil, errors.New("credentials need a key id and a secret")
	}
	pt, err := json.Marshal(sealedCredentials(c))
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
	var c sealedCredentials
	if err := json.Unmarshal(pt, &c); err != nil || !Credentials(c).Valid() {
		return Credentials{}, fmt.Errorf("opening the credentials of account %q: %w", account, ErrCorrupt)
	}
	return Credentials(c), nil
}

// ResealCredentials returns credentials sealed for account under keyID
// re-sealed under the ring's sealing key, its id and true; or the blob,
// keyID and false when keyID already is the sealing key. Lifecycle uses it
// to move stored credentials to the newest key of a rotated ring; the
// opened credentials never leave this function.
func (k *Key) ResealCredentials(account string, blob []byte, keyID string) ([]byte, string, bool, error) {
	if keyID == k.ID() {
		return blob, keyID, false, nil
	}
	pt, err := k.Open(blob, keyID, []byte(account))
	if err != nil {
		return blob, keyID, false, fmt.Errorf("re-sealing the credentials of account %q: %w", account, err)
	}
	out, err := k.Seal(pt, []byte(account))
	clear(pt)
	if err != nil {
		return blob, keyID, false, err
	}
	return out, k.ID(), true, nil
}
