package tlsfiles_test

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/tlsfiles"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/testcerts"
)

func newCA(t *testing.T, name string) *testcerts.CA {
	t.Helper()
	ca, err := testcerts.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func issue(t *testing.T, f func(string) (*testcerts.Pair, error), cn string) *testcerts.Pair {
	t.Helper()
	p, err := f(cn)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func write(t *testing.T, dir string, server *testcerts.Pair, caPEM []byte, mod time.Time) testcerts.Files {
	t.Helper()
	f, err := testcerts.WriteServerFiles(dir, server, caPEM, mod)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// serve accepts TLS connections with cfg until the test ends; each
// connection completes its handshake and is closed.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = c.(*tls.Conn).Handshake()
				_ = c.Close()
			}()
		}
	}()
	return l.Addr().String()
}

// dial handshakes and returns the server certificate's serial.
func dial(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	// TLS 1.3 reports a rejected client certificate on the first read.
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

func TestReloaderVerifiesClientsAndRotates(t *testing.T) {
	dir := t.TempDir()
	ca1 := newCA(t, "ca-1")
	server1 := issue(t, ca1.Server, "gateway")
	client1 := issue(t, ca1.Client, "cluster-autoscaler")
	files := write(t, dir, server1, ca1.PEM, time.Now().Add(-time.Hour))

	var reloads []error
	r, err := tlsfiles.New(tlsfiles.Files{CertFile: files.Cert, KeyFile: files.Key, ClientCAFile: files.ClientCA}, nil, func(err error) { reloads = append(reloads, err) })
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, r.ServerConfig())

	if sn, err := dial(addr, testcerts.ClientConfig(ca1, client1, "localhost")); err != nil || sn != server1.SerialNumber.String() {
		t.Fatalf("mTLS handshake: serial %s, err %v", sn, err)
	}
	if _, err := dial(addr, testcerts.ClientConfig(ca1, nil, "localhost")); err == nil {
		t.Fatal("a client without a certificate was accepted")
	}
	stranger := issue(t, newCA(t, "other").Client, "intruder")
	if _, err := dial(addr, testcerts.ClientConfig(ca1, stranger, "localhost")); err == nil {
		t.Fatal("a client certificate from another CA was accepted")
	}

	// Rotation: new server certificate and a new client CA.
	ca2 := newCA(t, "ca-2")
	server2 := issue(t, ca2.Server, "gateway")
	client2 := issue(t, ca2.Client, "cluster-autoscaler")
	write(t, dir, server2, ca2.PEM, time.Now())
	if sn, err := dial(addr, testcerts.ClientConfig(ca2, client2, "localhost")); err != nil || sn != server2.SerialNumber.String() {
		t.Fatalf("after rotation: serial %s, err %v", sn, err)
	}
	if _, err := dial(addr, testcerts.ClientConfig(ca2, client1, "localhost")); err == nil {
		t.Fatal("a client of the retired CA was accepted after rotation")
	}

	// A broken rotation (key does not match) keeps the working material.
	if err := os.WriteFile(files.Key, server1.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(files.Key, later, later); err != nil {
		t.Fatal(err)
	}
	if sn, err := dial(addr, testcerts.ClientConfig(ca2, client2, "localhost")); err != nil || sn != server2.SerialNumber.String() {
		t.Fatalf("after a broken rotation: serial %s, err %v", sn, err)
	}
	if len(reloads) != 2 || reloads[0] != nil || reloads[1] == nil {
		t.Fatalf("reload outcomes = %v, want [ok, error]", reloads)
	}
}

func TestReloaderFailsFast(t *testing.T) {
	dir := t.TempDir()
	server := issue(t, newCA(t, "ca").Server, "gateway")
	files := write(t, dir, server, []byte("not a certificate"), time.Now())
	if _, err := tlsfiles.New(tlsfiles.Files{CertFile: files.Cert, KeyFile: files.Key, ClientCAFile: files.ClientCA}, nil, nil); err == nil {
		t.Error("a client CA file without certificates was accepted")
	}
	if _, err := tlsfiles.New(tlsfiles.Files{CertFile: files.Cert, KeyFile: files.Key}, nil, nil); err == nil {
		t.Error("missing client CA accepted")
	}
	if _, err := tlsfiles.New(tlsfiles.Files{CertFile: files.Cert, KeyFile: dir + "/nope", ClientCAFile: files.ClientCA}, nil, nil); err == nil {
		t.Error("missing key accepted")
	}
}

// Without a client CA (OptionalClientCA: the REST server) no client
// certificate is asked for, the offered ALPN protocols are served, and a
// rotated server certificate is picked up.
func TestReloaderWithoutClientCA(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "ca")
	server := issue(t, ca.Server, "gateway-rest")
	files := write(t, dir, server, ca.PEM, time.Now().Add(-time.Hour))
	rl, err := tlsfiles.New(tlsfiles.Files{CertFile: files.Cert, KeyFile: files.Key, OptionalClientCA: true, NextProtos: []string{"h2", "http/1.1"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, rl.ServerConfig())
	cfg := testcerts.ClientConfig(ca, nil, "localhost")
	cfg.NextProtos = []string{"http/1.1"}
	serial, err := dial(addr, cfg)
	if err != nil || serial != server.SerialNumber.String() {
		t.Fatalf("handshake without a client certificate: %v (serial %s)", err, serial)
	}
	if c := rl.Current(); c.ClientAuth != tls.NoClientCert || c.ClientCAs != nil {
		t.Errorf("client certificates requested without a client CA: %v", c.ClientAuth)
	}
	server2 := issue(t, ca.Server, "gateway-rest")
	write(t, dir, server2, ca.PEM, time.Now())
	if serial, err := dial(addr, cfg); err != nil || serial != server2.SerialNumber.String() {
		t.Fatalf("after rotation: %v (serial %s, want %s)", err, serial, server2.SerialNumber)
	}
	if _, err := tlsfiles.New(tlsfiles.Files{CertFile: files.Cert, OptionalClientCA: true}, nil, nil); err == nil {
		t.Error("missing key file accepted")
	}
}
