// Package migrate_test runs nodesmithctl's migration against nodesmith
// itself: the converted configuration passes lifecycle's checker (the code
// path of `lifecycle --check-config`).
package migrate_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/migrate"
	"github.com/nodesmith/nodesmith/services/lifecycle/service"
)

const fixtures = "../../cmd/nodesmithctl/migrate/testdata"

// convertedConfig converts the prototype fixture into dir (with the
// prototype's hook scripts beside it, as docs/migration.md says) and
// returns the file's path.
func convertedConfig(t *testing.T, dir string) (string, *migrate.Result) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtures, "prototype-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := migrate.ConvertConfig(data, migrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{migrate.AfterCreatedHook, migrate.BeforeDeleteHook} {
		b, err := os.ReadFile(filepath.Join(fixtures, "hooks", h))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "hooks", h), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "nodesmith.yaml")
	if err := os.WriteFile(path, res.YAML, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, res
}

func TestConvertedConfigPassesCheckConfig(t *testing.T) {
	path, _ := convertedConfig(t, t.TempDir())
	if err := service.ValidateConfigFile(path); err != nil {
		t.Fatalf("lifecycle --check-config refuses the converted file: %v", err)
	}
}

// The checker is strict: the prototype's file itself is refused (so the
// test above can fail).
func TestPrototypeConfigFailsCheckConfig(t *testing.T) {
	if err := service.ValidateConfigFile(filepath.Join(fixtures, "prototype-config.yaml")); err == nil {
		t.Fatal("the prototype's file passes the checker")
	}
}
