package simvm

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// GenerateSigner returns a fresh ed25519 SSH signer. It is used for per-VM
// host keys, host CAs and test client keys alike.
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
