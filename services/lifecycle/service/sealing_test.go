package service_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/services/lifecycle/service"
)

// A file with hook env values needs the sealing key ring; a key file that
// is missing or unparseable stops start-up with how to make one.
func TestSecretsKeyFileChecksAtStart(t *testing.T) {
	env := natstest.Start(t)
	bad := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(bad, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, keyFile := range map[string]string{
		"no key file":  "",
		"missing file": filepath.Join(t.TempDir(), "absent"),
		"unparseable":  bad,
	} {
		t.Run(name, func(t *testing.T) {
			cfg := fastConfig(testConfig)
			cfg.SecretsKeyFile = keyFile
			err := service.Run(context.Background(), cfg, service.Deps{Conn: env.Conn, Logger: testLogger(t)})
			if err == nil || !strings.Contains(err.Error(), "head -c 32 /dev/urandom | base64") {
				t.Fatalf("err = %v, want a failed start saying how to make a key", err)
			}
		})
	}
}
