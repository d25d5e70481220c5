package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/config"
	"github.com/nodesmith/nodesmith/services/hook-runner/service"
)

func validConfig() service.Config {
	c := service.DefaultConfig()
	c.SSH.KeyFile = "/secrets/id_ed25519"
	c.SSH.KnownHostsFiles = []string{"/config/known_hosts"}
	return c
}

func TestDefaultConfig(t *testing.T) {
	c := service.DefaultConfig()
	if c.HealthAddr != ":8087" || c.Concurrency != 50 || c.HookTimeout != 15*time.Minute || c.SSH.User != "root" ||
		c.SSH.Port != 22 || c.SSH.TrustOnFirstUse || len(c.SSH.KnownHostsFiles) != 0 {
		t.Fatalf("defaults = %+v", c)
	}
	// Defaults alone are not runnable: credentials and a host key policy
	// must be chosen explicitly.
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "no ssh credentials") || !strings.Contains(err.Error(), "host keys") {
		t.Fatalf("Validate(defaults) = %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*service.Config)
		want   string
	}{
		{"valid", func(*service.Config) {}, ""},
		{"password value and tofu", func(c *service.Config) {
			c.SSH.KeyFile, c.SSH.KnownHostsFiles = "", nil
			c.SSH.Password, c.SSH.TrustOnFirstUse = "pw", true
		}, ""},
		{"no credentials", func(c *service.Config) { c.SSH.KeyFile = "" }, "no ssh credentials"},
		{"passphrase without key", func(c *service.Config) {
			c.SSH.KeyFile, c.SSH.PasswordFile, c.SSH.KeyPassphraseFile = "", "/pw", "/pp"
		}, "passphrase"},
		{"no host key policy", func(c *service.Config) { c.SSH.KnownHostsFiles = nil }, "host keys"},
		{"zero concurrency", func(c *service.Config) { c.Concurrency = 0 }, "concurrency"},
		{"bad port", func(c *service.Config) { c.SSH.Port = 0 }, "ssh port"},
		{"empty user", func(c *service.Config) { c.SSH.User = " " }, "ssh user"},
		{"zero hook timeout", func(c *service.Config) { c.HookTimeout = 0 }, "hook timeout"},
		{"zero grace", func(c *service.Config) { c.ShutdownGrace = 0 }, "shutdown grace"},
		{"zero connect timeout", func(c *service.Config) { c.SSH.ConnectTimeout = 0 }, "connect timeout"},
		{"bad topology", func(c *service.Config) { c.Topology.MaxDeliver = 1 }, "topology"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want an error about %q", err, tt.want)
			}
		})
	}
}

func TestConfigFromFlagsAndEnvironment(t *testing.T) {
	c := service.DefaultConfig()
	fs := flag.NewFlagSet("hook-runner", flag.ContinueOnError)
	c.RegisterFlags(fs)
	env := map[string]string{
		"NODESMITH_SSH_KNOWN_HOSTS":         "/a/known_hosts, /b/known_hosts",
		"NODESMITH_SSH_TRUST_ON_FIRST_USE":  "true",
		"NODESMITH_SSH_USER":                "ubuntu",
		"NODESMITH_CONCURRENCY":             "7",
		"NODESMITH_HOOK_TIMEOUT":            "5m",
		"NODESMITH_SSH_PASSWORD":            "hunter2",
		"NODESMITH_SSH_PRIVATE_KEY":         "-----BEGIN OPENSSH PRIVATE KEY-----",
		"NODESMITH_SSH_KEY_PASSPHRASE":      "pp",
		"NODESMITH_SSH_KEY_PASSPHRASE_FILE": "/secrets/pp",
		"NODESMITH_SSH_CONNECT_TIMEOUT":     "3s",
		"NODESMITH_SHUTDOWN_GRACE":          "45s",
		"NODESMITH_HEALTH_ADDR":             ":9999",
		"NODESMITH_RUNNER_ID":               "hook-runner-abc12",
		"NODESMITH_SSH_PORT":                "2222",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	args := []string{"--ssh-known-hosts", "/c/known_hosts", "--concurrency", "9"}
	if err := config.Parse(fs, args, lookup); err != nil {
		t.Fatal(err)
	}
	c.ReadSecretEnv(lookup)
	if got := strings.Join(c.SSH.KnownHostsFiles, ","); got != "/c/known_hosts" {
		t.Errorf("known hosts = %q: the flag should win over the environment", got)
	}
	if c.Concurrency != 9 || c.SSH.User != "ubuntu" || !c.SSH.TrustOnFirstUse || c.HookTimeout != 5*time.Minute ||
		c.SSH.ConnectTimeout != 3*time.Second || c.ShutdownGrace != 45*time.Second || c.HealthAddr != ":9999" ||
		c.RunnerID != "hook-runner-abc12" || c.SSH.Port != 2222 || c.SSH.KeyPassphraseFile != "/secrets/pp" {
		t.Errorf("config = %+v", c)
	}
	if c.SSH.Password != "hunter2" || c.SSH.PrivateKey == "" || c.SSH.KeyPassphrase != "pp" {
		t.Errorf("secrets not read from the environment")
	}

	fs2 := flag.NewFlagSet("hook-runner", flag.ContinueOnError)
	c2 := service.DefaultConfig()
	c2.RegisterFlags(fs2)
	if err := config.Parse(fs2, nil, lookup); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c2.SSH.KnownHostsFiles, ","); got != "/a/known_hosts,/b/known_hosts" {
		t.Errorf("known hosts from the environment = %q", got)
	}
}

func TestSecretsNeverPrinted(t *testing.T) {
	c := validConfig()
	c.SSH.Password = "hunter2"
	c.SSH.PrivateKey = "PRIVATE-KEY-MATERIAL"
	c.SSH.KeyPassphrase = "passphrase-value"
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "cfg", c, "password", c.SSH.Password)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("config", "cfg", c, "password", c.SSH.Password)
	j, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	printed := strings.Join([]string{
		fmt.Sprintf("%v", c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprint(c.SSH.Password),
		string(j), logs.String(),
	}, "\n")
	for _, secret := range []string{"hunter2", "PRIVATE-KEY-MATERIAL", "passphrase-value"} {
		if strings.Contains(printed, secret) {
			t.Fatalf("secret %q printed:\n%s", secret, printed)
		}
	}
	if !strings.Contains(printed, "[redacted]") {
		t.Fatalf("no redaction marker in:\n%s", printed)
	}
}

func TestRunFailsFastOnBadConfiguration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deps := service.Deps{Logger: slog.New(slog.DiscardHandler)}
	if err := service.Run(ctx, service.DefaultConfig(), deps); err == nil || !strings.Contains(err.Error(), "invalid configuration") {
		t.Fatalf("Run(defaults) = %v, want invalid configuration", err)
	}
	c := validConfig() // key and known_hosts files that do not exist
	c.NATS.URL = "nats://127.0.0.1:1"
	if err := service.Run(ctx, c, deps); err == nil || !strings.Contains(err.Error(), "ssh") {
		t.Fatalf("Run(missing key file) = %v, want an ssh error before any NATS connection", err)
	}
}
