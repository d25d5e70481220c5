// Package manifests renders nodesmith's Kubernetes manifests
// (deploy/kustomize) with the kustomize Go API, exactly as
// `kubectl apply -k` would, and checks the structural rules every
// rendering must keep: probes, resource limits and a locked-down security
// context on every container, no RBAC wildcards, no reference to a
// ConfigMap, Secret, ServiceAccount or role that the rendering does not
// contain, and no Kubernetes API token for pods that have no use for one.
package manifests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Render builds the kustomization in dir from the files on disk and
// returns its objects in kustomize's output order.
func Render(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range m.Resources() {
		// Through JSON: unstructured objects hold int64 and float64
		// numbers, as the API machinery decodes them, not YAML's int.
		js, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(js); err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		out = append(out, obj)
	}
	return out, nil
}

// Compose renders a kustomization in namespace made of the given
// resources (usually a base or an overlay) and components, as a user
// would write it, without touching the source tree: the kustomization is
// written to a temporary directory under tmpDir (paths to the sources are
// relative to it, as kustomize requires).
func Compose(tmpDir, namespace string, resources, components []string) ([]*unstructured.Unstructured, error) {
	dir, err := os.MkdirTemp(tmpDir, "compose-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var b strings.Builder
	b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n")
	if namespace != "" {
		fmt.Fprintf(&b, "namespace: %s\n", namespace)
	}
	for _, list := range []struct {
		field string
		paths []string
	}{{"resources", resources}, {"components", components}} {
		if len(list.paths) == 0 {
			continue
		}
		b.WriteString(list.field + ":\n")
		for _, p := range list.paths {
			abs, err := filepath.Abs(p)
			if err != nil {
				return nil, err
			}
			rel, err := filepath.Rel(dir, abs)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(&b, "  - %s\n", filepath.ToSlash(rel))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(b.String()), 0o600); err != nil {
		return nil, err
	}
	return Render(dir)
}
