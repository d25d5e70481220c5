package embedded

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/ssh"
)

// loadOrCreateSigner returns the ed25519 key stored at path (OpenSSH PEM),
// generating and saving one on first use, so keys survive restarts.
func loadOrCreateSigner(path string) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		s, perr := ssh.ParsePrivateKey(b)
		if perr != nil {
			return nil, fmt.Errorf("parsing key %s: %w (delete it to generate a new one)", path, perr)
		}
		return s, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading key %s: %w", path, err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "nodesmith dev")
	if err != nil {
		return nil, fmt.Errorf("encoding key: %w", err)
	}
	if err := writeFileAtomic(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, err
	}
	return ssh.NewSignerFromKey(priv)
}

// loadOrCreateSecret returns the secret stored at path, generating a random
// hex secret of n bytes on first use.
func loadOrCreateSecret(path string, n int) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	buf := make([]byte, n)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	s := hex.EncodeToString(buf)
	return s, writeFileAtomic(path, []byte(s+"\n"), 0o600)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("renaming %s: %w", tmp, err)
	}
	return nil
}
