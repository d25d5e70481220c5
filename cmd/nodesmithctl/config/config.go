// Package config is nodesmithctl's configuration file, like a kubeconfig:
// named contexts, each with the gateway's REST URL, the CA bundle to verify
// it with and the file holding the bearer token (never the token itself),
// and the current context.
//
//	current-context: prod
//	contexts:
//	- name: prod
//	  server: https://nodesmith-gateway.example:8443
//	  certificate-authority: /etc/nodesmith/ca.pem
//	  token-file: ~/.config/nodesmith/prod.token
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// EnvVar names the environment variable that overrides the default path.
const EnvVar = "NODESMITHCONFIG"

// Context is one named way to reach a gateway.
type Context struct {
	Name string `json:"name"`
	// Server is the REST API's base URL.
	Server string `json:"server,omitempty"`
	// CertificateAuthority is a PEM bundle file to verify the server with.
	CertificateAuthority string `json:"certificate-authority,omitempty"`
	// TokenFile holds the bearer token.
	TokenFile string `json:"token-file,omitempty"`
}

// File is the configuration file.
type File struct {
	CurrentContext string    `json:"current-context,omitempty"`
	Contexts       []Context `json:"contexts,omitempty"`

	// path is where it was read from (relative paths in it are relative to
	// its directory).
	path string
}

// DefaultPath is $NODESMITHCONFIG, else ~/.config/nodesmith/config.yaml.
func DefaultPath() (string, error) {
	if p := os.Getenv(EnvVar); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no config file location (set $%s or pass --config): %w", EnvVar, err)
	}
	return filepath.Join(dir, "nodesmith", "config.yaml"), nil
}

// Load reads the file at path; a missing file is an empty configuration.
func Load(path string) (*File, error) {
	f := &File{path: path}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := yaml.UnmarshalStrict(b, f); err != nil {
		msg := err.Error()
		if strings.Contains(msg, `"token"`) || strings.Contains(msg, "token:") {
			return nil, fmt.Errorf("config %s: a context must not hold its token inline: put it in a file (mode 0600) and name it with token-file", path)
		}
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	f.path = path
	seen := map[string]bool{}
	for i, c := range f.Contexts {
		switch {
		case c.Name == "":
			return nil, fmt.Errorf("config %s: contexts[%d] has no name", path, i)
		case seen[c.Name]:
			return nil, fmt.Errorf("config %s: context %q is defined twice", path, c.Name)
		}
		seen[c.Name] = true
	}
	return f, nil
}

// Path is where the file lives.
func (f *File) Path() string { return f.path }

// Context returns the named context.
func (f *File) Context(name string) (Context, bool) {
	i := slices.IndexFunc(f.Contexts, func(c Context) bool { return c.Name == name })
	if i < 0 {
		return Context{}, false
	}
	return f.Contexts[i], true
}

// Set adds or replaces a context.
func (f *File) Set(c Context) {
	if i := slices.IndexFunc(f.Contexts, func(x Context) bool { return x.Name == c.Name }); i >= 0 {
		f.Contexts[i] = c
		return
	}
	f.Contexts = append(f.Contexts, c)
}

// Delete removes a context (and unsets it as current).
func (f *File) Delete(name string) bool {
	n := len(f.Contexts)
	f.Contexts = slices.DeleteFunc(f.Contexts, func(c Context) bool { return c.Name == name })
	if f.CurrentContext == name {
		f.CurrentContext = ""
	}
	return len(f.Contexts) != n
}

// Resolve makes a path in the file absolute: "~/" is the home directory,
// relative paths are relative to the file's directory.
func (f *File) Resolve(p string) string {
	if p == "" {
		return ""
	}
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	if filepath.IsAbs(p) || f.path == "" {
		return p
	}
	return filepath.Join(filepath.Dir(f.path), p)
}

// Save writes the file (mode 0600, its directory 0700 when created),
// atomically.
func (f *File) Save() error {
	if f.path == "" {
		return errors.New("config: no path to save to")
	}
	b, err := yaml.Marshal(f)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.path), ".config-*.yaml")
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(append(bytes.TrimSpace(b), '\n'))
	if err == nil {
		err = tmp.Chmod(0o600)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := os.Rename(tmp.Name(), f.path); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}
