package manifestrun

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/nodesmith/nodesmith/tools/kube/installsecrets"
)

// generateInstallSecrets fills the copy k of deploy/kustomize with what an
// installer provides before rendering:
//
//   - the per-install Secrets the repository does not ship, as
//     `make secrets` would;
//   - in place of the placeholders of components/secrets/files (what only
//     the user can provide: cloud credentials, the hook runner's SSH key
//     and known_hosts), test values of the same form: random cloud
//     credentials (the emulator is told them from the rendered Secret), a
//     fresh ed25519 key and an @cert-authority line for a fresh host CA.
func generateInstallSecrets(t *testing.T, k string) {
	t.Helper()
	files := filepath.Join(k, "components", "secrets", "files")
	err := filepath.WalkDir(files, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !placeholder(string(b)) {
			return nil
		}
		var v string
		switch d.Name() {
		case "secretId":
			v = "AKID" + randomHex(t, 16)
		case "secretKey":
			v = randomHex(t, 16)
		case "id_ed25519":
			v = sshKey(t)
		case "known_hosts":
			_, ca, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			pub, err := ssh.NewPublicKey(ca.Public())
			if err != nil {
				t.Fatal(err)
			}
			v = "@cert-authority * " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub))) + " manifestrun-host-ca"
		default:
			return nil // not one this test knows: left as it is (used, it fails the test)
		}
		return os.WriteFile(p, []byte(v+"\n"), 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	// `make secrets`: tools/kube/installsecrets, into the generated/
	// directory components/secrets reads.
	secrets, err := installsecrets.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := installsecrets.WriteDir(filepath.Join(k, "components", "secrets", "generated"), secrets); err != nil {
		t.Fatal(err)
	}
}

// placeholder: a file holding only comments and REPLACE-ME text, or
// nothing.
func placeholder(s string) bool {
	if strings.Contains(s, "REPLACE-ME") {
		return true
	}
	for line := range strings.SplitSeq(s, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func sshKey(t *testing.T) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "manifestrun")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(pem.EncodeToMemory(block)))
}
