// Package secrets implements ports.Credentials from mounted files and the
// environment, reloading the files periodically so a rotated Kubernetes
// Secret takes effect without a restart. Secret values never appear in
// logs or errors: only account names do.
//
// Sources, in order of precedence for an account defined in several:
//
//  0. the catalog (see catalog.go): credentials an operator stored with the
//     account through the admin API, sealed, opened with --secrets-key-file;
//  1. a directory (--credentials-dir) with one sub-directory per account
//     holding the files secretId, secretKey and optionally token;
//  2. a YAML or JSON file (--credentials-file):
//     accounts: {<account>: {secretId: ..., secretKey: ..., token: ...}};
//  3. environment variables NODESMITH_ACCOUNT_<ACCOUNT>_SECRET_ID,
//     _SECRET_KEY and _TOKEN, where <ACCOUNT> is the account name in upper
//     case with every character other than A-Z and 0-9 replaced by "_".
//
// The names are Tencent Cloud's (they came first) and mean the same for
// every cloud (libs/cloudspec Credentials): on Alibaba Cloud secretId is
// the AccessKeyId, secretKey the AccessKeySecret and token the STS
// SecurityToken.
package secrets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nodesmith/nodesmith/libs/run"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/metrics"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// File names inside an account's directory.
const (
	FileSecretID  = "secretId"
	FileSecretKey = "secretKey"
	FileToken     = "token"
)

// EnvPrefix and the suffixes form an account's environment variables.
const (
	EnvPrefix          = "NODESMITH_ACCOUNT_"
	EnvSuffixSecretID  = "_SECRET_ID"
	EnvSuffixSecretKey = "_SECRET_KEY"
	EnvSuffixToken     = "_TOKEN"
)

var _ ports.Credentials = (*Store)(nil)

// Options say where credentials come from.
type Options struct {
	Dir  string
	File string
	// Environ is the environment as "KEY=value" (os.Environ()).
	Environ []string
	Logger  *slog.Logger
	Metrics *metrics.Cloud
}

// Store holds the current credentials of every account.
type Store struct {
	o     Options
	log   *slog.Logger
	mu    sync.RWMutex
	creds map[string]ports.Credential // by account name (files)
	env   map[string]ports.Credential // by EnvName(account)
	// catalog holds the opened catalog credentials by account name.
	catalog map[string]ports.Credential
}

// New loads the credentials once; any unreadable or incomplete source is an
// error, so bad configuration fails at start.
func New(o Options) (*Store, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	env, err := fromEnv(o.Environ)
	if err != nil {
		return nil, err
	}
	s := &Store{o: o, log: o.Logger, env: env}
	creds, err := s.load()
	if err != nil {
		return nil, err
	}
	s.creds = creds
	s.log.Info("cloud credentials loaded", "accounts", s.Accounts())
	return s, nil
}

// Lookup implements ports.Credentials.
func (s *Store) Lookup(account string) (ports.Credential, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if c, ok := s.catalog[account]; ok {
		return c, nil
	}
	if c, ok := s.creds[account]; ok {
		return c, nil
	}
	if c, ok := s.env[EnvName(account)]; ok {
		return c, nil
	}
	return ports.Credential{}, fmt.Errorf("%w %q", ports.ErrNoCredentials, account)
}

// Accounts lists the accounts with credentials (environment accounts by
// their variable name part), sorted.
func (s *Store) Accounts() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	names := slices.Collect(maps.Keys(s.creds))
	for n := range s.catalog {
		names = append(names, "catalog:"+n)
	}
	for n := range s.env {
		names = append(names, "env:"+n)
	}
	slices.Sort(names)
	return names
}

// Reload re-reads the files. On error the previous credentials stay in use.
func (s *Store) Reload() error {
	creds, err := s.load()
	if err != nil {
		s.o.Metrics.CredentialsReload("error")
		return err
	}
	s.mu.Lock()
	old := s.creds
	s.creds = creds
	s.mu.Unlock()
	var added, removed, rotated []string
	for n, c := range creds {
		if o, ok := old[n]; !ok {
			added = append(added, n)
		} else if o != c {
			rotated = append(rotated, n)
		}
	}
	for n := range old {
		if _, ok := creds[n]; !ok {
			removed = append(removed, n)
		}
	}
	if len(added)+len(removed)+len(rotated) == 0 {
		s.o.Metrics.CredentialsReload("unchanged")
		return nil
	}
	s.o.Metrics.CredentialsReload("changed")
	slices.Sort(added)
	slices.Sort(removed)
	slices.Sort(rotated)
	s.log.Info("cloud credentials changed", "added", added, "removed", removed, "rotated", rotated)
	return nil
}

// Run reloads every interval until ctx ends.
func (s *Store) Run(ctx context.Context, every time.Duration) error {
	if s.o.Dir == "" && s.o.File == "" {
		<-ctx.Done() // nothing on disk to watch
		return nil
	}
	return run.Every(ctx, every, func(context.Context) {
		if err := s.Reload(); err != nil {
			s.log.Warn("reloading cloud credentials failed; keeping the previous ones", "err", err)
		}
	})
}

func (s *Store) load() (map[string]ports.Credential, error) {
	creds := map[string]ports.Credential{}
	if s.o.File != "" {
		fc, err := fromFile(s.o.File)
		if err != nil {
			return nil, err
		}
		maps.Copy(creds, fc)
	}
	if s.o.Dir != "" {
		dc, err := fromDir(s.o.Dir)
		if err != nil {
			return nil, err
		}
		maps.Copy(creds, dc)
	}
	return creds, nil
}

func fromDir(dir string) (map[string]ports.Credential, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading credentials directory: %w", err)
	}
	out := map[string]ports.Credential{}
	for _, e := range entries {
		// Kubernetes mounts Secrets through "..data" symlinks; skip those
		// and any other hidden entry.
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(dir, name)
		if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
			continue
		}
		c := ports.Credential{
			KeyID:         readTrimmed(filepath.Join(path, FileSecretID)),
			Secret:        readTrimmed(filepath.Join(path, FileSecretKey)),
			SecurityToken: readTrimmed(filepath.Join(path, FileToken)),
		}
		if !c.Valid() {
			return nil, fmt.Errorf("credentials of account %q in %s: both %s and %s must be non-empty files", name, dir, FileSecretID, FileSecretKey)
		}
		out[name] = c
	}
	return out, nil
}

func readTrimmed(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

type fileFormat struct {
	Accounts map[string]struct {
		SecretID  string `yaml:"secretId"`
		SecretKey string `yaml:"secretKey"`
		Token     string `yaml:"token"`
	} `yaml:"accounts"`
}

func fromFile(path string) (map[string]ports.Credential, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading credentials file: %w", err)
	}
	var f fileFormat
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) { // an empty file has no accounts
		// yaml errors quote offending lines, which could hold a secret:
		// report only where the file is broken.
		return nil, fmt.Errorf("credentials file %s is not valid YAML/JSON of the form accounts: {<name>: {secretId, secretKey, token}}", path)
	}
	out := map[string]ports.Credential{}
	for name, a := range f.Accounts {
		c := ports.Credential{KeyID: strings.TrimSpace(a.SecretID), Secret: strings.TrimSpace(a.SecretKey), SecurityToken: strings.TrimSpace(a.Token)}
		if !c.Valid() {
			return nil, fmt.Errorf("credentials file %s: account %q needs secretId and secretKey", path, name)
		}
		out[name] = c
	}
	return out, nil
}

func fromEnv(environ []string) (map[string]ports.Credential, error) {
	out := map[string]ports.Credential{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, EnvPrefix) {
			continue
		}
		rest := strings.TrimPrefix(k, EnvPrefix)
		for _, suffix := range []string{EnvSuffixSecretID, EnvSuffixSecretKey, EnvSuffixToken} {
			name, found := strings.CutSuffix(rest, suffix)
			if !found || name == "" {
				continue
			}
			c := out[name]
			switch suffix {
			case EnvSuffixSecretID:
				c.KeyID = strings.TrimSpace(v)
			case EnvSuffixSecretKey:
				c.Secret = strings.TrimSpace(v)
			case EnvSuffixToken:
				c.SecurityToken = strings.TrimSpace(v)
			}
			out[name] = c
			break
		}
	}
	for name, c := range out {
		if !c.Valid() {
			return nil, fmt.Errorf("environment credentials of account %s: both %s%s%s and %s%s%s must be set", name,
				EnvPrefix, name, EnvSuffixSecretID, EnvPrefix, name, EnvSuffixSecretKey)
		}
	}
	return out, nil
}

// EnvName is the part of the environment variable names that names account.
func EnvName(account string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		default:
			return '_'
		}
	}, account)
}
