package manifests_test

import (
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/nodesmith/nodesmith/tools/kube/installsecrets"
	"github.com/nodesmith/nodesmith/tools/kube/manifests"
)

// generated is the copy of deploy/kustomize the renderings use, with the
// per-install secrets generated into it as `make secrets` does.
var generated struct {
	once    sync.Once
	dir     string
	secrets []installsecrets.Secret
	err     error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if generated.dir != "" {
		os.RemoveAll(generated.dir)
	}
	os.Exit(code)
}

// copyTree copies the regular files of src (deploy/kustomize) to dst,
// leaving out any generated/ directory a developer's `make secrets` left:
// tests never read real secrets.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "generated" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
}

func generatedKustomizeDir(t *testing.T) string {
	t.Helper()
	src := kustomizeDir(t)
	generated.once.Do(func() {
		dir, err := os.MkdirTemp("", "nodesmith-kustomize-")
		if err != nil {
			generated.err = err
			return
		}
		generated.dir = dir
		k := filepath.Join(dir, "deploy", "kustomize")
		if generated.err = copyTree(src, k); generated.err != nil {
			return
		}
		if generated.secrets, generated.err = installsecrets.Generate(); generated.err != nil {
			return
		}
		_, generated.err = installsecrets.WriteDir(filepath.Join(k, "components", "secrets", "generated"), generated.secrets)
	})
	if generated.err != nil {
		t.Fatal(generated.err)
	}
	return filepath.Join(generated.dir, "deploy", "kustomize")
}

// Without `make secrets`, the overlays do not render, and the error names
// the missing generated file (the component's comment says to run it).
func TestOverlaysNeedMakeSecrets(t *testing.T) {
	k := filepath.Join(t.TempDir(), "kustomize")
	if err := copyTree(kustomizeDir(t), k); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"prod", "dev"} {
		_, err := manifests.Render(filepath.Join(k, "overlays", o))
		if err == nil || !strings.Contains(err.Error(), "generated/") {
			t.Errorf("overlays/%s without make secrets: err = %v, want a missing generated/ file", o, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(k, "components", "secrets", "kustomization.yaml"))
	if err != nil || !strings.Contains(string(b), "make secrets") {
		t.Errorf("components/secrets/kustomization.yaml does not say to run make secrets: %v", err)
	}
}

// The published sealing key, which the repository shipped until issue 15
// (libs/sealed refuses it by its hash).
const publishedSealingKey = "GMRdT78aGBHmEjT2p+scF7rsG+TIJ350EaUhVGYIIvs="

var (
	nkeySeed   = regexp.MustCompile(`S[UOACN][A-Z2-7]{50,}`)
	privateKey = regexp.MustCompile(`PRIVATE KEY-----|BEGIN OPENSSH PRIVATE`)
)

// No rendering holds key material except what `make secrets` generated
// for it: no private key, no NKey seed, not the key once published. The
// committed tree holds none either.
func TestNoKeyMaterialShipped(t *testing.T) {
	generatedKustomizeDir(t)
	allowed := map[string]bool{}
	for _, s := range generated.secrets {
		for _, v := range s.Data {
			for _, m := range nkeySeed.FindAllString(v, -1) {
				allowed[m] = true
			}
		}
	}
	check := func(where, text string) {
		t.Helper()
		for _, m := range nkeySeed.FindAllString(text, -1) {
			if !allowed[m] {
				t.Errorf("%s holds an NKey seed", where)
			}
		}
		if privateKey.MatchString(text) {
			t.Errorf("%s holds a private key", where)
		}
		if strings.Contains(text, publishedSealingKey) || strings.Contains(text, base64.StdEncoding.EncodeToString([]byte(publishedSealingKey))) {
			t.Errorf("%s holds the published sealing key", where)
		}
	}
	for _, r := range renderings(t) {
		for _, o := range r.render(t).Objects {
			js, err := json.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			check(r.name+" "+o.GetKind()+"/"+o.GetName(), string(js))
			// Secret data is base64: look inside too.
			if o.GetKind() == "Secret" {
				data, _ := o.Object["data"].(map[string]any)
				for k, v := range data {
					b, err := base64.StdEncoding.DecodeString(v.(string))
					if err != nil {
						t.Fatalf("%s Secret %s key %s: %v", r.name, o.GetName(), k, err)
					}
					check(r.name+" Secret "+o.GetName()+"/"+k, string(b))
				}
			}
		}
	}
	// The committed tree (deploy/kustomize as checked out, generated/ left out).
	if err := filepath.WalkDir(kustomizeDir(t), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "generated" {
			return filepath.SkipDir
		}
		if d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		check(p, string(b))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// What `make secrets` writes: the Secret names and keys the manifests and
// the NATS authorization rely on, real NKeys, and no overwriting.
func TestInstallSecrets(t *testing.T) {
	secrets, err := installsecrets.Generate()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]map[string]string{}
	for _, s := range secrets {
		byName[s.Name] = s.Data
	}
	want := map[string][]string{
		"nodesmith-secrets-key":   {"key"},
		"api-gateway-rest-tokens": {"admin", "readonly"},
		"nats-users":              {"lifecycle", "api-gateway", "cloud-adapter", "hook-runner"},
	}
	for _, svc := range []string{"lifecycle", "api-gateway", "cloud-adapter", "hook-runner"} {
		want["nats-nkey-"+svc] = []string{"seed"}
	}
	if len(byName) != len(want) {
		t.Errorf("secrets %v, want %v", len(byName), len(want))
	}
	for name, keys := range want {
		for _, k := range keys {
			if strings.TrimSpace(byName[name][k]) == "" {
				t.Errorf("secret %s lacks key %s", name, k)
			}
		}
	}
	for _, svc := range []string{"lifecycle", "api-gateway", "cloud-adapter", "hook-runner"} {
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(byName["nats-nkey-"+svc]["seed"])))
		if err != nil {
			t.Fatalf("%s seed: %v", svc, err)
		}
		pub, _ := kp.PublicKey()
		if !nkeys.IsValidPublicUserKey(pub) || pub != strings.TrimSpace(byName["nats-users"][svc]) {
			t.Errorf("%s: nats-users holds %q, the seed's public key is %q", svc, byName["nats-users"][svc], pub)
		}
	}
	if byName["api-gateway-rest-tokens"]["admin"] == byName["api-gateway-rest-tokens"]["readonly"] {
		t.Error("admin and readonly tokens are equal")
	}

	dir := filepath.Join(t.TempDir(), "generated")
	paths, err := installsecrets.WriteDir(dir, secrets)
	if err != nil || len(paths) != 11 {
		t.Fatalf("WriteDir: %d files, %v", len(paths), err)
	}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v", p, fi.Mode(), err)
		}
	}
	before, _ := os.ReadFile(filepath.Join(dir, "nodesmith-secrets-key", "key"))
	again, _ := installsecrets.Generate()
	if _, err := installsecrets.WriteDir(dir, again); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("second WriteDir: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "nodesmith-secrets-key", "key")); string(after) != string(before) {
		t.Fatal("the key was overwritten")
	}
	// A write that fails part way leaves nothing a second run would refuse.
	partial := filepath.Join(t.TempDir(), "generated")
	broken := []installsecrets.Secret{
		{Name: "first", Data: map[string]string{"k": "v"}},
		{Name: "second", Data: map[string]string{"missing-dir/k": "v"}}, // cannot be created
	}
	if _, err := installsecrets.WriteDir(partial, broken); err == nil {
		t.Fatal("WriteDir into a missing directory succeeded")
	}
	if _, err := os.Stat(filepath.Join(partial, "first", "k")); !os.IsNotExist(err) {
		t.Fatalf("a failed WriteDir left %s behind (%v)", filepath.Join(partial, "first", "k"), err)
	}
	y, err := installsecrets.YAML("nodesmith", secrets)
	if err != nil || strings.Count(string(y), "kind: Secret") != len(want) {
		t.Fatalf("YAML: %v\n%s", err, y)
	}
}
