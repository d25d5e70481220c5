package secrets_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/secrets"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func lookup(t *testing.T, s *secrets.Store, account string) ports.Credential {
	t.Helper()
	c, err := s.Lookup(account)
	if err != nil {
		t.Fatalf("Lookup(%s): %v", account, err)
	}
	return c
}

func TestSourcesAndPrecedence(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "creds", "prod", "secretId"), "dir-id\n")
	write(t, filepath.Join(dir, "creds", "prod", "secretKey"), "dir-key\n")
	write(t, filepath.Join(dir, "creds", "prod", "token"), "dir-token")
	// Kubernetes' Secret mount bookkeeping is ignored.
	write(t, filepath.Join(dir, "creds", "..data", "junk"), "x")
	file := filepath.Join(dir, "creds.yaml")
	write(t, file, "accounts:\n  prod: {secretId: file-id, secretKey: file-key}\n  staging:\n    secretId: st-id\n    secretKey: st-key\n")

	s, err := secrets.New(secrets.Options{
		Dir: filepath.Join(dir, "creds"), File: file,
		Environ: []string{
			"NODESMITH_ACCOUNT_PROD_SECRET_ID=env-id", "NODESMITH_ACCOUNT_PROD_SECRET_KEY=env-key",
			"NODESMITH_ACCOUNT_TEST_BJ_SECRET_ID=tb-id", "NODESMITH_ACCOUNT_TEST_BJ_SECRET_KEY=tb-key",
			"NODESMITH_NATS_URL=nats://x", "PATH=/bin",
		},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for account, want := range map[string]ports.Credential{
		"prod":    {KeyID: "dir-id", Secret: "dir-key", SecurityToken: "dir-token"},
		"staging": {KeyID: "st-id", Secret: "st-key"},
		"test-bj": {KeyID: "tb-id", Secret: "tb-key"},
	} {
		if got := lookup(t, s, account); got.KeyID != want.KeyID || got.Secret != want.Secret || got.SecurityToken != want.SecurityToken {
			t.Errorf("%s: wrong credential (id %q)", account, got.KeyID)
		}
	}
	if _, err := s.Lookup("nobody"); !errors.Is(err, ports.ErrNoCredentials) {
		t.Fatalf("Lookup(nobody) = %v, want ErrNoCredentials", err)
	}
}

func TestJSONFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "creds.json")
	write(t, file, `{"accounts":{"a":{"secretId":"id","secretKey":"key"}}}`)
	s, err := secrets.New(secrets.Options{File: file})
	if err != nil {
		t.Fatal(err)
	}
	if lookup(t, s, "a").Secret != "key" {
		t.Fatal("wrong key")
	}
}

func TestBadSourcesFailWithoutLeakingSecrets(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		o    func() secrets.Options
	}{
		{"missing directory", func() secrets.Options { return secrets.Options{Dir: filepath.Join(dir, "nope")} }},
		{"half a key in the directory", func() secrets.Options {
			write(t, filepath.Join(dir, "half", "a", "secretId"), "SUPERSECRET")
			return secrets.Options{Dir: filepath.Join(dir, "half")}
		}},
		{"broken file", func() secrets.Options {
			write(t, filepath.Join(dir, "bad.yaml"), "accounts: {a: {secretId: SUPERSECRET, secretKey: [\n")
			return secrets.Options{File: filepath.Join(dir, "bad.yaml")}
		}},
		{"unknown field", func() secrets.Options {
			write(t, filepath.Join(dir, "typo.yaml"), "accounts: {a: {secretID: SUPERSECRET, secretKey: k}}\n")
			return secrets.Options{File: filepath.Join(dir, "typo.yaml")}
		}},
		{"half a key in the environment", func() secrets.Options {
			return secrets.Options{Environ: []string{"NODESMITH_ACCOUNT_A_SECRET_KEY=SUPERSECRET"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := secrets.New(tc.o())
			if err == nil {
				t.Fatal("New succeeded")
			}
			if strings.Contains(err.Error(), "SUPERSECRET") {
				t.Fatalf("error leaks a secret: %v", err)
			}
		})
	}
}

func TestReloadPicksUpRotationAndKeepsOldOnError(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a", "secretId"), "id1")
	write(t, filepath.Join(dir, "a", "secretKey"), "key1")
	var logs bytes.Buffer
	s, err := secrets.New(secrets.Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}

	write(t, filepath.Join(dir, "a", "secretKey"), "key2")
	write(t, filepath.Join(dir, "b", "secretId"), "idb")
	write(t, filepath.Join(dir, "b", "secretKey"), "keyb")
	if err := s.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if lookup(t, s, "a").Secret != "key2" || lookup(t, s, "b").KeyID != "idb" {
		t.Fatal("rotation not picked up")
	}

	write(t, filepath.Join(dir, "a", "secretKey"), "")
	if err := s.Reload(); err == nil {
		t.Fatal("Reload accepted an incomplete key")
	}
	if lookup(t, s, "a").Secret != "key2" {
		t.Fatal("a failed reload dropped the working credential")
	}

	if err := os.RemoveAll(filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "a", "secretKey"), "key3")
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup("b"); err == nil {
		t.Fatal("removed account still has credentials")
	}
	for _, secret := range []string{"id1", "key1", "key2", "key3", "idb", "keyb"} {
		if strings.Contains(logs.String(), "="+secret) || strings.Contains(logs.String(), " "+secret) {
			t.Fatalf("logs contain secret %q:\n%s", secret, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "rotated") {
		t.Fatalf("rotation not logged:\n%s", logs.String())
	}
}

func TestCredentialNeverPrintsItsSecret(t *testing.T) {
	c := ports.Credential{KeyID: "AKIDsecret", Secret: "topsecret"}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "cred", c)
	for _, out := range []string{fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s", c, c, c, c), logs.String()} {
		if strings.Contains(out, "secret") {
			t.Fatalf("credential printed: %s", out)
		}
	}
}

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{"prod": "PROD", "test-bj.2": "TEST_BJ_2", "A_b": "A_B"} {
		if got := secrets.EnvName(in); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", in, got, want)
		}
	}
}
