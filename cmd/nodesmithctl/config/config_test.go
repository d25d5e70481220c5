package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "config.yaml")
	f, err := Load(path)
	if err != nil || len(f.Contexts) != 0 {
		t.Fatalf("missing file: %v %v", f, err)
	}
	f.Set(Context{Name: "prod", Server: "https://gw:8443", TokenFile: "prod.token", CertificateAuthority: "/etc/ca.pem"})
	f.Set(Context{Name: "dev", Server: "http://127.0.0.1:8080", TokenFile: "~/dev.token"})
	f.Set(Context{Name: "prod", Server: "https://gw2:8443", TokenFile: "prod.token"})
	f.CurrentContext = "prod"
	if err := f.Save(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v", st.Mode(), err)
	}
	if st, _ := os.Stat(filepath.Dir(path)); st.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v", st.Mode())
	}
	g, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := g.Context("prod")
	if !ok || c.Server != "https://gw2:8443" || g.CurrentContext != "prod" || len(g.Contexts) != 2 {
		t.Fatalf("loaded %+v", g)
	}
	if got := g.Resolve(c.TokenFile); got != filepath.Join(filepath.Dir(path), "prod.token") {
		t.Errorf("relative token file resolves to %s", got)
	}
	home, _ := os.UserHomeDir()
	if got := g.Resolve("~/dev.token"); got != filepath.Join(home, "dev.token") {
		t.Errorf("~ resolves to %s", got)
	}
	if !g.Delete("prod") || g.CurrentContext != "" || g.Delete("prod") {
		t.Fatalf("delete: %+v", g)
	}
}

func TestLoadRejects(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct{ content, want string }{
		"inline token": {"contexts:\n- name: a\n  server: https://x\n  token: s3cret\n", "token-file"},
		"unknown":      {"contexts:\n- name: a\n  sever: https://x\n", "sever"},
		"no name":      {"contexts:\n- server: https://x\n", "no name"},
		"twice":        {"contexts:\n- name: a\n- name: a\n", "twice"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error shows the token", name)
		}
	}
}

func TestDefaultPath(t *testing.T) {
	t.Setenv(EnvVar, "/tmp/x.yaml")
	if p, _ := DefaultPath(); p != "/tmp/x.yaml" {
		t.Fatalf("with $%s: %s", EnvVar, p)
	}
	t.Setenv(EnvVar, "")
	t.Setenv("XDG_CONFIG_HOME", "/cfg")
	if p, _ := DefaultPath(); p != "/cfg/nodesmith/config.yaml" {
		t.Fatalf("default: %s", p)
	}
}
