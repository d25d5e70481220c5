// Package installsecrets makes the per-install Secrets of nodesmith
// (`make secrets`): nothing usable is committed in deploy/kustomize, so
// every install generates its own
//
//	nodesmith-secrets-key   key                 the sealing key ring (libs/sealed): one
//	                                            base64 32-byte key per line, the first seals
//	api-gateway-rest-tokens admin, readonly     REST bearer tokens
//	nats-nkey-<service>     seed                the service's NATS NKey user seed
//	                                            (lifecycle, api-gateway, cloud-adapter, hook-runner)
//	nats-users              <service>           the services' NKey public keys, for the
//	                                            NATS server's authorization
//
// either as files under a directory that components/secrets reads
// (deploy/kustomize/components/secrets/generated, git-ignored), refusing
// to overwrite any, or as Secret YAML for a secret manager.
package installsecrets

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nkeys"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Services are the four nodesmith services, each with its own NATS NKey.
var Services = []string{"lifecycle", "api-gateway", "cloud-adapter", "hook-runner"}

// Names of the Secrets and their keys (a contract with the manifests and
// the NATS authorization).
const (
	SealingKeySecret = "nodesmith-secrets-key"
	SealingKeyKey    = "key"
	RESTTokensSecret = "api-gateway-rest-tokens"
	NATSUsersSecret  = "nats-users"
	NKeySeedKey      = "seed"
)

// NKeySecret is the Secret holding service's NKey seed.
func NKeySecret(service string) string { return "nats-nkey-" + service }

// Secret is one generated Secret: key -> value.
type Secret struct {
	Name string
	Data map[string]string
}

// Generate makes a fresh set of Secrets.
func Generate() ([]Secret, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	token := func() (string, error) {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		return hex.EncodeToString(b), nil
	}
	admin, err := token()
	if err != nil {
		return nil, err
	}
	readonly, err := token()
	if err != nil {
		return nil, err
	}
	out := []Secret{
		{Name: SealingKeySecret, Data: map[string]string{SealingKeyKey: "# nodesmith sealing key ring: one base64 32-byte key per line, the first seals, every one opens.\n" +
			"# To rotate: add a new key as the FIRST line, roll out, wait for lifecycle's re-seal log, remove the old line.\n" +
			base64.StdEncoding.EncodeToString(key) + "\n"}},
		{Name: RESTTokensSecret, Data: map[string]string{"admin": admin + "\n", "readonly": readonly + "\n"}},
	}
	users := Secret{Name: NATSUsersSecret, Data: map[string]string{}}
	for _, svc := range Services {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, fmt.Errorf("nkey for %s: %w", svc, err)
		}
		seed, err := kp.Seed()
		if err != nil {
			return nil, err
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, err
		}
		out = append(out, Secret{Name: NKeySecret(svc), Data: map[string]string{NKeySeedKey: string(seed) + "\n"}})
		users.Data[svc] = pub + "\n"
		kp.Wipe()
	}
	return append(out, users), nil
}

// ErrExists: WriteDir found a file it would have overwritten.
var ErrExists = errors.New("refusing to overwrite existing secrets")

// WriteDir writes secrets as dir/<secret>/<key> (directories 0700, files
// 0600). It writes nothing if any of those files exists, and leaves
// nothing behind if a write fails.
func WriteDir(dir string, secrets []Secret) ([]string, error) {
	var paths []string
	for _, s := range secrets {
		for _, k := range sortedKeys(s.Data) {
			p := filepath.Join(dir, s.Name, k)
			if _, err := os.Lstat(p); err == nil {
				return nil, fmt.Errorf("%w: %s exists (delete the directory %s to start over: the running install then needs the new values everywhere)", ErrExists, p, dir)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
			paths = append(paths, p)
		}
	}
	// All or nothing: a failure part way removes what this call wrote, so
	// a second run is not refused over a half-written set.
	var written []string
	undo := func(err error) ([]string, error) {
		for _, p := range written {
			_ = os.Remove(p)
		}
		return nil, err
	}
	for _, s := range secrets {
		if err := os.MkdirAll(filepath.Join(dir, s.Name), 0o700); err != nil {
			return undo(err)
		}
		for _, k := range sortedKeys(s.Data) {
			p := filepath.Join(dir, s.Name, k)
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return undo(err)
			}
			written = append(written, p)
			_, err = f.WriteString(s.Data[k])
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return undo(err)
			}
		}
	}
	return paths, nil
}

// YAML renders secrets as Kubernetes Secret manifests in namespace.
func YAML(namespace string, secrets []Secret) ([]byte, error) {
	var b strings.Builder
	for i, s := range secrets {
		if i > 0 {
			b.WriteString("---\n")
		}
		obj := corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: namespace},
			Type:       corev1.SecretTypeOpaque,
			StringData: s.Data,
		}
		y, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		b.Write(y)
	}
	return []byte(b.String()), nil
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
