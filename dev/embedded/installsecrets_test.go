package embedded

import (
	"path/filepath"
	"testing"

	"github.com/nodesmith/nodesmith/libs/sealed"
	"github.com/nodesmith/nodesmith/tools/kube/installsecrets"
)

// The sealing key ring `make secrets` writes is one the services accept.
func TestMakeSecretsKeyIsAcceptedBySealed(t *testing.T) {
	secrets, err := installsecrets.Generate()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := installsecrets.WriteDir(dir, secrets); err != nil {
		t.Fatal(err)
	}
	key, err := sealed.LoadKeyFile(filepath.Join(dir, installsecrets.SealingKeySecret, installsecrets.SealingKeyKey))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := key.SealString(sealed.PurposeHookEnv, "X", "v")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := key.OpenString(sealed.PurposeHookEnv, "X", tok); err != nil || v != "v" {
		t.Fatalf("round trip: %q, %v", v, err)
	}
}
