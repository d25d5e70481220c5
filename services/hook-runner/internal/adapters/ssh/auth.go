package ssh

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"golang.org/x/crypto/ssh"
)

// credentials are the client's secrets as loaded from files or values.
type credentials struct {
	signers  []ssh.Signer
	password []byte
}

// loadCredentials reads the private key and password. Secrets from files
// win over values; both may be given for a key (file) and a password
// (environment), in which case both methods are offered, key first.
func loadCredentials(o Options) (credentials, error) {
	var c credentials
	passphrase := o.KeyPassphrase
	if o.KeyPassphraseFile != "" {
		p, err := readSecretFile(o.KeyPassphraseFile)
		if err != nil {
			return c, fmt.Errorf("reading ssh key passphrase: %w", err)
		}
		passphrase = p
	}
	keyPEM := o.PrivateKey
	if o.KeyFile != "" {
		b, err := os.ReadFile(o.KeyFile)
		if err != nil {
			return c, fmt.Errorf("reading ssh private key: %w", err)
		}
		keyPEM = b
	}
	if len(keyPEM) > 0 {
		s, err := parsePrivateKey(keyPEM, passphrase)
		if err != nil {
			return c, err
		}
		c.signers = []ssh.Signer{s}
	}
	c.password = o.Password
	if o.PasswordFile != "" {
		p, err := readSecretFile(o.PasswordFile)
		if err != nil {
			return c, fmt.Errorf("reading ssh password: %w", err)
		}
		c.password = p
	}
	if len(c.signers) == 0 && len(c.password) == 0 {
		return c, errors.New("no ssh credentials: need a private key or a password")
	}
	return c, nil
}

// parsePrivateKey never includes key material or the passphrase in errors.
func parsePrivateKey(pemBytes, passphrase []byte) (ssh.Signer, error) {
	if len(passphrase) > 0 {
		s, err := ssh.ParsePrivateKeyWithPassphrase(pemBytes, passphrase)
		if err != nil {
			return nil, fmt.Errorf("decrypting ssh private key (wrong passphrase or not an encrypted key): %w", err)
		}
		return s, nil
	}
	s, err := ssh.ParsePrivateKey(pemBytes)
	if err != nil {
		var missing *ssh.PassphraseMissingError
		if errors.As(err, &missing) {
			return nil, errors.New("ssh private key is encrypted: provide its passphrase")
		}
		return nil, fmt.Errorf("parsing ssh private key: %w", err)
	}
	return s, nil
}

// readSecretFile reads a mounted secret, dropping the trailing newline
// editors and `echo` add (but not other whitespace, which may be part of a
// password).
func readSecretFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r")), nil
}

// authMethods offers the key, then the password both as "password" and as
// "keyboard-interactive" (what sshd with PAM asks for).
func (c credentials) authMethods() []ssh.AuthMethod {
	var methods []ssh.AuthMethod
	if len(c.signers) > 0 {
		methods = append(methods, ssh.PublicKeys(c.signers...))
	}
	if len(c.password) > 0 {
		pw := string(c.password)
		methods = append(methods,
			ssh.Password(pw),
			ssh.KeyboardInteractive(func(_, _ string, questions []string, echos []bool) ([]string, error) {
				answers := make([]string, len(questions))
				for i := range questions {
					if echos[i] {
						// A visible prompt asks for something other than
						// the password (a username, an OTP label).
						return nil, errors.New("unexpected keyboard-interactive prompt")
					}
					answers[i] = pw
				}
				return answers, nil
			}))
	}
	return methods
}
