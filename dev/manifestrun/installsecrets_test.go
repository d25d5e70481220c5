package manifestrun

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// generateInstallSecrets writes the per-install Secrets that the
// repository does not ship into the copy k of deploy/kustomize, as
// `make secrets` would.
func generateInstallSecrets(t *testing.T, k string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(k, "components", "secrets", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "generated/") {
		t.Fatal("components/secrets reads generated/: generate them with tools/kube/installsecrets")
	}
}
