// Package sshdtest runs OpenSSH's sshd (Debian package openssh-server) on a
// loopback port for tests: generated host and client keys in a temporary
// directory, optionally a host certificate signed by a generated host CA,
// key authentication for the current user and, when running as root,
// password authentication for a throwaway local account. It is a test
// helper; nothing in production imports it.
package sshdtest

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/logging/logtest"

	"golang.org/x/crypto/ssh"
)

// Options configure Start.
type Options struct {
	// HostCert makes sshd present a host certificate signed by a
	// generated CA (Server.HostCA) for 127.0.0.1.
	HostCert bool
	// Port to listen on; 0 picks a free one.
	Port int
	// ExtraConfig goes at the top of sshd_config; for most keywords sshd
	// keeps the first value it reads, so it overrides the defaults below.
	ExtraConfig string
	// Password also lets the dedicated account PasswordAccountName log in
	// with a random password (Server.PasswordUser, Server.Password), by
	// sshd's own "password" method (no PAM). The account is created for
	// the test and removed after it; creating it needs root, so without
	// root the test is skipped. Only that account and the current user
	// (with the client key) may log in.
	Password bool
}

// Server is a running sshd.
type Server struct {
	// Host and Port sshd listens on (127.0.0.1).
	Host string
	Port int
	// User is the login name that the client key authenticates (the
	// user running the test).
	User string
	// HostKey is sshd's plain host key.
	HostKey ssh.PublicKey
	// HostCA signed sshd's host certificate (nil without Options.HostCert).
	HostCA ssh.Signer
	// ClientKey is authorized for User.
	ClientKey ssh.Signer
	// Dir is sshd's temporary directory; tests may put files there.
	Dir string
	// PasswordUser and Password log in by password (Options.Password).
	PasswordUser string
	Password     string

	clientKeyPEM []byte
	bin, config  string
	cmd          *exec.Cmd
	logs         *logtest.Buffer
	exited       chan struct{}
}

// Addr is "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// Binary finds sshd, failing the test (or skipping it under -short) when
// the openssh-server package is not installed.
func Binary(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"/usr/sbin/sshd", "/usr/local/sbin/sshd"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("sshd"); err == nil {
		return p
	}
	if testing.Short() {
		t.Skip("sshd not found; install the Debian package openssh-server to run this test")
	}
	t.Fatal("sshd not found: install the Debian package openssh-server (apt-get install openssh-server)")
	return ""
}

// Start runs sshd until the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin := Binary(t)
	u, err := user.Current()
	if err != nil {
		t.Fatalf("current user: %v", err)
	}
	if os.Geteuid() == 0 {
		// sshd running as root insists on its privilege separation
		// directory, which the package's service unit normally creates.
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			t.Fatalf("creating /run/sshd for sshd's privilege separation: %v", err)
		}
	}
	dir := t.TempDir()
	// sshd refuses keys in group/world-writable directories.
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s := &Server{Host: "127.0.0.1", User: u.Username, Dir: dir}
	var authConfig string
	if o.Password {
		s.PasswordUser, s.Password = passwordAccount(t)
		authConfig = passwordConfig(s.PasswordUser, s.User)
	}

	hostKeyPath := filepath.Join(dir, "ssh_host_ed25519_key")
	hostSigner := writeKey(t, hostKeyPath)
	s.HostKey = hostSigner.PublicKey()
	clientPath := filepath.Join(dir, "client_key")
	s.ClientKey = writeKey(t, clientPath)
	s.clientKeyPEM, err = os.ReadFile(clientPath)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "authorized_keys"), ssh.MarshalAuthorizedKey(s.ClientKey.PublicKey()), 0o600)

	var certLine string
	if o.HostCert {
		s.HostCA = NewSigner(t)
		cert := &ssh.Certificate{
			Key:             s.HostKey,
			Serial:          1,
			CertType:        ssh.HostCert,
			KeyId:           "sshdtest",
			ValidPrincipals: []string{s.Host, "localhost"},
			ValidAfter:      uint64(time.Now().Add(-time.Hour).Unix()),
			ValidBefore:     ssh.CertTimeInfinity,
		}
		if err := cert.SignCert(rand.Reader, s.HostCA); err != nil {
			t.Fatalf("signing host certificate: %v", err)
		}
		certPath := hostKeyPath + "-cert.pub"
		writeFile(t, certPath, ssh.MarshalAuthorizedKey(cert), 0o644)
		certLine = "HostCertificate " + certPath + "\n"
	}

	for try := 0; ; try++ {
		port := o.Port
		if port == 0 {
			port = freePort(t)
		}
		s.Port = port
		config := fmt.Sprintf(`%s
%sPort %d
ListenAddress %s
HostKey %s
%sPidFile none
StrictModes no
UsePAM no
AuthorizedKeysFile %s
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
PrintMotd no
LogLevel VERBOSE
`, o.ExtraConfig, authConfig, port, s.Host, hostKeyPath, certLine, filepath.Join(dir, "authorized_keys"))
		configPath := filepath.Join(dir, "sshd_config")
		writeFile(t, configPath, []byte(config), 0o600)
		s.bin, s.config = bin, configPath
		err := s.start()
		if err == nil {
			break
		}
		if o.Port != 0 || try == 2 {
			t.Fatalf("starting sshd: %v\nsshd log:\n%s", err, s.logs.String())
		}
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("sshd log (%s):\n%s", s.Addr(), s.logs.String())
		}
	})
	return s
}

// Restart starts a stopped server again with the same keys and port.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		t.Fatalf("restarting sshd: %v\nsshd log:\n%s", err, s.logs.String())
	}
}

func (s *Server) start() error {
	// -D: stay in the foreground; -e: log to stderr.
	if s.logs == nil {
		s.logs = &logtest.Buffer{}
	}
	s.cmd = exec.Command(s.bin, "-D", "-e", "-f", s.config)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	// Own process group, so Stop can take sshd's children down with it.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.exited = make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return errors.New("sshd exited during start-up")
		default:
		}
		if banner(s.Addr()) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	return errors.New("sshd did not answer within 15s")
}

// banner reports whether an SSH server answers on addr.
func banner(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "SSH-2.0-")
}

// Stop terminates sshd and waits for it. Established sessions are served by
// sshd's per-connection children, which are left to end with their client
// (as on a real host when the daemon restarts).
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Logs returns what sshd logged so far.
func (s *Server) Logs() string { return s.logs.String() }

// ClientKeyFile writes the client key to a new file, encrypted with
// passphrase when it is not empty, and returns its path.
func (s *Server) ClientKeyFile(t testing.TB, passphrase string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "id_ed25519")
	if passphrase == "" {
		writeFile(t, path, s.clientKeyPEM, 0o600)
		return path
	}
	raw, err := ssh.ParseRawPrivateKey(s.clientKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKeyWithPassphrase(raw, "", []byte(passphrase))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, pem.EncodeToMemory(block), 0o600)
	return path
}

// KnownHostsLine is a known_hosts line for sshd's plain host key.
func (s *Server) KnownHostsLine() string {
	return knownHostsPattern(s.Host, s.Port) + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.HostKey)))
}

// CALine is a known_hosts line trusting the host CA for sshd's address.
func (s *Server) CALine() string {
	return "@cert-authority " + knownHostsPattern(s.Host, s.Port) + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.HostCA.PublicKey())))
}

// AuthorizedKey is sshd's plain host key in authorized_keys format (the
// form a pinned key takes).
func (s *Server) AuthorizedKey() string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.HostKey)))
}

func knownHostsPattern(host string, port int) string {
	if port == 22 {
		return host
	}
	return fmt.Sprintf("[%s]:%d", host, port)
}

// WriteFile writes a file in a fresh temporary directory and returns its path.
func WriteFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	writeFile(t, p, []byte(content), 0o600)
	return p
}

// NewSigner returns a fresh ed25519 signer.
func NewSigner(t testing.TB) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// writeKey generates an ed25519 key, writes it in OpenSSH format to path
// (and the public half to path.pub) and returns it.
func writeKey(t testing.TB, path string) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, pem.EncodeToMemory(block), 0o600)
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path+".pub", ssh.MarshalAuthorizedKey(signer.PublicKey()), 0o644)
	return signer
}

func writeFile(t testing.TB, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int { return freePort(t) }
