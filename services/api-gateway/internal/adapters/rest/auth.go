package rest

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// Role is what a token may do.
type Role int

// Roles, in increasing power.
const (
	RoleNone Role = iota
	// RoleReadOnly may read (GET, HEAD).
	RoleReadOnly
	// RoleAdmin may also change things.
	RoleAdmin
)

func (r Role) String() string {
	switch r {
	case RoleReadOnly:
		return "read-only"
	case RoleAdmin:
		return "admin"
	}
	return "none"
}

// MinTokenLength rejects guessable tokens.
const MinTokenLength = 16

// TokenConfig says where bearer tokens come from. Files hold one token per
// line (blank lines and lines starting with # are ignored) and are re-read
// when they change, so a rotated Secret takes effect without a restart.
type TokenConfig struct {
	AdminTokens, ReadOnlyTokens       []string
	AdminTokenFile, ReadOnlyTokenFile string
}

// Authenticator maps bearer tokens to roles. It keeps only SHA-256 digests
// of the tokens and compares digests in constant time, against every
// known token, so neither timing nor length reveals a token.
type Authenticator struct {
	static []credential
	files  []*tokenFile
	log    *slog.Logger
}

type credential struct {
	digest [sha256.Size]byte
	role   Role
}

type tokenFile struct {
	path string
	role Role

	mu        sync.Mutex
	checked   time.Time
	mod       time.Time
	size      int64
	creds     []credential
	lastError string
}

// NewAuthenticator loads cfg; unreadable files or short tokens fail here.
func NewAuthenticator(cfg TokenConfig, log *slog.Logger) (*Authenticator, error) {
	if log == nil {
		log = slog.Default()
	}
	a := &Authenticator{log: log}
	for _, src := range []struct {
		tokens []string
		role   Role
	}{{cfg.AdminTokens, RoleAdmin}, {cfg.ReadOnlyTokens, RoleReadOnly}} {
		for i, t := range src.tokens {
			t = strings.TrimSpace(t)
			if len(t) < MinTokenLength {
				return nil, fmt.Errorf("%s token #%d is shorter than %d characters", src.role, i+1, MinTokenLength)
			}
			a.static = append(a.static, credential{digest: sha256.Sum256([]byte(t)), role: src.role})
		}
	}
	for _, f := range []struct {
		path string
		role Role
	}{{cfg.AdminTokenFile, RoleAdmin}, {cfg.ReadOnlyTokenFile, RoleReadOnly}} {
		if f.path == "" {
			continue
		}
		tf := &tokenFile{path: f.path, role: f.role}
		if err := tf.load(); err != nil {
			return nil, err
		}
		a.files = append(a.files, tf)
	}
	return a, nil
}

// Configured reports whether any token source is configured.
func (a *Authenticator) Configured() bool { return len(a.static) > 0 || len(a.files) > 0 }

// Authenticate returns the role of token (RoleNone if unknown).
func (a *Authenticator) Authenticate(token string) Role {
	if token == "" {
		return RoleNone
	}
	d := sha256.Sum256([]byte(token))
	role := RoleNone
	match := func(creds []credential) {
		for _, c := range creds {
			// No early exit: every comparison runs.
			if subtle.ConstantTimeCompare(d[:], c.digest[:]) == 1 && c.role > role {
				role = c.role
			}
		}
	}
	match(a.static)
	for _, f := range a.files {
		match(f.current(a.log))
	}
	return role
}

// current returns the file's tokens, re-reading the file at most once a
// second and only when its modification time or size changed. A file that
// turns unreadable keeps its last tokens (a Secret update briefly swaps
// symlinks) and logs once.
func (f *tokenFile) current(log *slog.Logger) []credential {
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Since(f.checked) < time.Second {
		return f.creds
	}
	f.checked = time.Now()
	fi, err := os.Stat(f.path)
	if err == nil && fi.ModTime().Equal(f.mod) && fi.Size() == f.size {
		return f.creds
	}
	if err == nil {
		err = f.loadLocked()
	}
	if err != nil {
		if msg := err.Error(); msg != f.lastError {
			f.lastError = msg
			log.Error("reloading token file failed, keeping the previous tokens", "file", f.path, "role", f.role.String(), "err", err)
		}
		return f.creds
	}
	f.lastError = ""
	log.Info("reloaded token file", "file", f.path, "role", f.role.String(), "tokens", len(f.creds))
	return f.creds
}

func (f *tokenFile) load() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checked = time.Now()
	return f.loadLocked()
}

func (f *tokenFile) loadLocked() error {
	fi, err := os.Stat(f.path)
	if err != nil {
		return fmt.Errorf("reading %s token file: %w", f.role, err)
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		return fmt.Errorf("reading %s token file: %w", f.role, err)
	}
	var creds []credential
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if len(t) < MinTokenLength {
			// The line number, never the token.
			return fmt.Errorf("%s token file %s line %d: token shorter than %d characters", f.role, f.path, n, MinTokenLength)
		}
		creds = append(creds, credential{digest: sha256.Sum256([]byte(t)), role: f.role})
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading %s token file %s: %w", f.role, f.path, err)
	}
	f.creds, f.mod, f.size = creds, fi.ModTime(), fi.Size()
	return nil
}
