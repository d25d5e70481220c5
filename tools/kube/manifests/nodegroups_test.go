package manifests_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNodeGroupsConfigIsValid runs lifecycle's own validator
// (lifecycle --check-config) on the node groups file the manifests ship,
// as rendered into the ConfigMap: an example that lifecycle rejects would
// crash-loop the first install.
func TestNodeGroupsConfigIsValid(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the lifecycle service; skipped under -short")
	}
	root := filepath.Dir(filepath.Dir(kustomizeDir(t)))
	for _, r := range renderings(t)[:2] { // the overlays
		t.Run(r.name, func(t *testing.T) {
			data := configMapData(t, r.render(t), "lifecycle-config", "node-groups.yaml")
			file := filepath.Join(t.TempDir(), "node-groups.yaml")
			if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.CommandContext(t.Context(), "go", "run", "./services/lifecycle/cmd/lifecycle", "--check-config", "--config-file", file)
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "is valid") {
				t.Fatalf("lifecycle --check-config: %v\n%s", err, out)
			}
		})
	}
}
