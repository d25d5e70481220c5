package simvm

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// GenerateSigner returns a fresh ed25519 SSH signer, e.g. for host CAs and
// client keys.
func GenerateSigner() (ssh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ed25519 key: %w", err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, fmt.Errorf("wrap ed25519 key: %w", err)
	}
	return s, nil
}

// loadOrCreateHostKey returns the VM's host key from its sandbox when reuse
// is set and the sandbox has one, and otherwise generates one and stores it
// there (HostKeyFile, mode 0600). A stored key that cannot be read or parsed
// is an error: silently replacing it would break every client that pinned
// the old one, in a way much harder to diagnose.
func loadOrCreateHostKey(sandbox, vmID string, reuse bool) (ssh.Signer, error) {
	path := filepath.Join(sandbox, HostKeyFile)
	if reuse {
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			s, err := ssh.ParsePrivateKey(b)
			if err != nil {
				return nil, fmt.Errorf("parse host key %s: %w (delete it to get a new one)", path, err)
			}
			return s, nil
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("read host key: %w", err)
		}
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "root@"+vmID)
	if err != nil {
		return nil, fmt.Errorf("encode host key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("store host key: %w", err)
	}
	if err := writeFileAtomic(path, pem.EncodeToMemory(block), 0o600, true); err != nil {
		return nil, fmt.Errorf("store host key: %w", err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, fmt.Errorf("wrap host key: %w", err)
	}
	return s, nil
}

// GenerateHostCA returns a new host certificate authority. Give it to
// Config.HostCA and put KnownHostsCALine(ca.PublicKey(), "*") into the
// client's known_hosts to trust every simulated VM.
func GenerateHostCA() (ssh.Signer, error) {
	return GenerateSigner()
}

// KnownHostsCALine renders an OpenSSH known_hosts line that trusts host
// certificates signed by ca for every host, e.g.
// "@cert-authority *,[*]:2222 ssh-ed25519 AAAA...".
//
// Pass the SSH ports the VMs listen on. OpenSSH's "*" already matches any
// host and port, but golang.org/x/crypto/ssh/knownhosts compares the port
// literally ("*" means port 22 only), so each non-22 port needs its own
// "[*]:PORT" pattern for Go clients.
func KnownHostsCALine(ca ssh.PublicKey, ports ...int) string {
	patterns := []string{"*"}
	for _, p := range ports {
		if p != 22 && p > 0 {
			patterns = append(patterns, fmt.Sprintf("[*]:%d", p))
		}
	}
	return "@cert-authority " + strings.Join(patterns, ",") + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(ca)))
}

// WriteKnownHostsCA writes a known_hosts file at path containing only the
// KnownHostsCALine for ca and ports.
func WriteKnownHostsCA(path string, ca ssh.PublicKey, ports ...int) error {
	if err := os.WriteFile(path, []byte(KnownHostsCALine(ca, ports...)+"\n"), 0o600); err != nil {
		return fmt.Errorf("write known_hosts %s: %w", path, err)
	}
	return nil
}

// signHostCert issues a host certificate for hostKey, valid for the given
// principals (the IP and names a client may dial the VM by).
func signHostCert(ca ssh.Signer, hostKey ssh.Signer, keyID string, principals []string) (ssh.Signer, error) {
	serial := make([]byte, 8)
	if _, err := rand.Read(serial); err != nil {
		return nil, fmt.Errorf("certificate serial: %w", err)
	}
	var s uint64
	for _, b := range serial {
		s = s<<8 | uint64(b)
	}
	cert := &ssh.Certificate{
		Key:             hostKey.PublicKey(),
		Serial:          s,
		CertType:        ssh.HostCert,
		KeyId:           keyID,
		ValidPrincipals: principals,
		// Backdate a little so a client clock slightly behind ours still
		// accepts the certificate.
		ValidAfter:  uint64(time.Now().Add(-5 * time.Minute).Unix()),
		ValidBefore: ssh.CertTimeInfinity,
	}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		return nil, fmt.Errorf("sign host certificate: %w", err)
	}
	certSigner, err := ssh.NewCertSigner(cert, hostKey)
	if err != nil {
		return nil, fmt.Errorf("certificate signer: %w", err)
	}
	return certSigner, nil
}
