// Package testcerts mints throwaway certificate authorities and
// certificates for tests of the gateway's mTLS.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte
}

// Pair is a certificate with its key, PEM-encoded.
type Pair struct {
	Cert         *x509.Certificate
	CertPEM      []byte
	KeyPEM       []byte
	Certificate  tls.Certificate
	SerialNumber *big.Int
}

var serial = big.NewInt(time.Now().UnixNano())

func nextSerial() *big.Int {
	serial = new(big.Int).Add(serial, big.NewInt(1))
	return new(big.Int).Set(serial)
}

// NewCA returns a self-signed CA named name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Server issues a server certificate for localhost and 127.0.0.1.
func (ca *CA) Server(cn string) (*Pair, error) {
	return ca.issue(cn, x509.ExtKeyUsageServerAuth, []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
}

// Client issues a client certificate.
func (ca *CA) Client(cn string) (*Pair, error) {
	return ca.issue(cn, x509.ExtKeyUsageClientAuth, nil, nil)
}

// ClientWith issues a client certificate with URI SANs (SPIFFE ids) and
// DNS SANs besides the common name.
func (ca *CA) ClientWith(cn string, uris, dns []string) (*Pair, error) {
	var us []*url.URL
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			return nil, err
		}
		us = append(us, u)
	}
	return ca.issueURIs(cn, x509.ExtKeyUsageClientAuth, dns, nil, us)
}

func (ca *CA) issue(cn string, usage x509.ExtKeyUsage, dns []string, ips []net.IP) (*Pair, error) {
	return ca.issueURIs(cn, usage, dns, ips, nil)
}

func (ca *CA) issueURIs(cn string, usage x509.ExtKeyUsage, dns []string, ips []net.IP, uris []*url.URL) (*Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn := nextSerial()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
		URIs:         uris,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	p := &Pair{
		Cert:         cert,
		CertPEM:      pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:       pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		SerialNumber: sn,
	}
	p.Certificate, err = tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	return p, err
}

// Files are the paths WriteServerFiles wrote.
type Files struct {
	Cert, Key, ClientCA string
}

// WriteServerFiles writes a server pair and a client CA bundle into dir
// with modification time mod (so tests can force a visible change).
func WriteServerFiles(dir string, server *Pair, clientCA []byte, mod time.Time) (Files, error) {
	f := Files{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), ClientCA: filepath.Join(dir, "ca.crt")}
	for path, data := range map[string][]byte{f.Cert: server.CertPEM, f.Key: server.KeyPEM, f.ClientCA: clientCA} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return f, fmt.Errorf("writing %s: %w", path, err)
		}
		if err := os.Chtimes(path, mod, mod); err != nil {
			return f, err
		}
	}
	return f, nil
}

// ClientConfig returns a client TLS config presenting client and trusting
// only ca, checking the server name serverName.
func ClientConfig(ca *CA, client *Pair, serverName string) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	cfg := &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}
	if client != nil {
		cfg.Certificates = []tls.Certificate{client.Certificate}
	}
	return cfg
}
