// Package tlsfiles serves TLS from certificate files that rotate (mounted
// Kubernetes Secrets, cert-manager): every handshake checks the files'
// modification times and re-reads them when they changed, so a rotated
// certificate or client CA is used without a restart. A rotation caught
// half-written keeps the previous, working material until the files are
// consistent again.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Files names the PEM files of a server, which verifies client
// certificates when ClientCAFile is set.
type Files struct {
	CertFile, KeyFile string
	// ClientCAFile holds the CA bundle client certificates must chain to.
	// Required unless OptionalClientCA: without it no client certificate
	// is asked for.
	ClientCAFile string
	// OptionalClientCA lets ClientCAFile be empty (the REST server, whose
	// clients authenticate with bearer tokens; the gRPC server always
	// verifies client certificates).
	OptionalClientCA bool
	// NextProtos are the ALPN protocols offered; {"h2"} when nil (gRPC).
	// An HTTP server that also speaks HTTP/1.1 lists both.
	NextProtos []string
}

// Reloader builds server TLS configs from Files, reloading on change.
type Reloader struct {
	files Files
	log   *slog.Logger
	// OnReload, when set, is told about every reload attempt's outcome.
	onReload func(err error)

	mu      sync.Mutex
	stamp   [3]fileStamp
	current *tls.Config
	// lastFailed is the stamp a reload last failed for, so one broken
	// rotation is logged once, not at every handshake.
	lastFailed [3]fileStamp
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// New loads the files once (failing fast on a bad configuration) and
// returns a Reloader. onReload may be nil.
func New(files Files, log *slog.Logger, onReload func(err error)) (*Reloader, error) {
	if files.CertFile == "" || files.KeyFile == "" {
		return nil, errors.New("certificate and key files are both required")
	}
	if files.ClientCAFile == "" && !files.OptionalClientCA {
		return nil, errors.New("certificate, key and client CA files are all required")
	}
	if log == nil {
		log = slog.Default()
	}
	r := &Reloader{files: files, log: log, onReload: onReload}
	stamp, err := r.stamps()
	if err != nil {
		return nil, err
	}
	cfg, err := r.load()
	if err != nil {
		return nil, err
	}
	r.stamp, r.current = stamp, cfg
	return r, nil
}

// ServerConfig returns the config to serve with: each handshake gets the
// current material through GetConfigForClient.
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.Current(), nil
		},
	}
}

// Current returns the up-to-date config, reloading first if a file changed.
func (r *Reloader) Current() *tls.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	stamp, err := r.stamps()
	if err != nil || stamp == r.stamp || stamp == r.lastFailed {
		// A missing file mid-rotation: keep serving what works.
		return r.current
	}
	cfg, err := r.load()
	if r.onReload != nil {
		r.onReload(err)
	}
	if err != nil {
		r.lastFailed = stamp
		r.log.Error("reloading TLS files failed, keeping the previous certificates", "cert_file", r.files.CertFile, "err", err)
		return r.current
	}
	r.stamp, r.current = stamp, cfg
	if leaf := cfg.Certificates[0].Leaf; leaf != nil {
		r.log.Info("reloaded TLS certificates", "cert_file", r.files.CertFile, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter)
	}
	return cfg
}

func (r *Reloader) stamps() ([3]fileStamp, error) {
	var s [3]fileStamp
	for i, f := range []string{r.files.CertFile, r.files.KeyFile, r.files.ClientCAFile} {
		if f == "" {
			continue // no client CA
		}
		fi, err := os.Stat(f)
		if err != nil {
			return s, fmt.Errorf("checking %s: %w", f, err)
		}
		s[i] = fileStamp{mod: fi.ModTime(), size: fi.Size()}
	}
	return s, nil
}

func (r *Reloader) load() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(r.files.CertFile, r.files.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("loading key pair %s / %s: %w", r.files.CertFile, r.files.KeyFile, err)
	}
	// gRPC needs HTTP/2 negotiated by ALPN; grpc-go adds h2 to the
	// configs GetConfigForClient returns, set it anyway so the config
	// also works for plain HTTP/2 servers.
	protos := r.files.NextProtos
	if protos == nil {
		protos = []string{"h2"}
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		NextProtos:   protos,
	}
	if r.files.ClientCAFile == "" {
		return cfg, nil
	}
	caPEM, err := os.ReadFile(r.files.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("reading client CA %s: %w", r.files.ClientCAFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("client CA %s holds no PEM certificate", r.files.ClientCAFile)
	}
	cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	return cfg, nil
}
