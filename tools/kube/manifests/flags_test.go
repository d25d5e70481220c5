package manifests_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nodesmith/nodesmith/tools/kube/manifests"
)

// TestEnvVarsNameRealFlags: every NODESMITH_* variable the manifests give
// a service (directly or through an envFrom ConfigMap) is one the service
// reads. libs/config silently ignores variables no flag is registered
// for, so a misspelt or renamed setting would otherwise be dropped
// without a trace. The service's flags are read from its source (and
// libs/), the way libs/config.EnvName derives the variables.
func TestEnvVarsNameRealFlags(t *testing.T) {
	root := filepath.Dir(filepath.Dir(kustomizeDir(t)))
	libs := knownEnv(t, filepath.Join(root, "libs"))
	for _, r := range renderings(t) {
		t.Run(r.name, func(t *testing.T) {
			s := r.render(t)
			for _, name := range services {
				known := knownEnv(t, filepath.Join(root, "services", name))
				for k := range libs {
					known[k] = true
				}
				w, c := workload(t, s, "Deployment", name)
				for _, env := range nodesmithEnv(t, s, w, c) {
					if !known[env] {
						t.Errorf("%s: %s is not a flag or variable the service reads", name, env)
					}
				}
			}
			// The node agent (a DaemonSet; its source is a command module).
			known := knownEnv(t, filepath.Join(root, "cmd", "nodesmith-node-agent"))
			for k := range libs {
				known[k] = true
			}
			w, c := workload(t, s, "DaemonSet", "node-agent")
			for _, env := range nodesmithEnv(t, s, w, c) {
				if !known[env] {
					t.Errorf("node-agent: %s is not a flag or variable the agent reads", env)
				}
			}
		})
	}
}

// nodesmithEnv lists the NODESMITH_* variables container c gets.
func nodesmithEnv(t *testing.T, s *manifests.Set, w manifests.Workload, c corev1.Container) []string {
	t.Helper()
	var out []string
	for _, e := range c.Env {
		out = append(out, e.Name)
	}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil {
			continue
		}
		o := s.Get("ConfigMap", w.Object.GetNamespace(), from.ConfigMapRef.Name)
		if o == nil {
			t.Fatalf("%s: envFrom ConfigMap %s missing", w.Name(), from.ConfigMapRef.Name)
		}
		data, _, _ := unstructured.NestedStringMap(o.Object, "data")
		for k := range data {
			out = append(out, from.Prefix+k)
		}
	}
	out = slices.DeleteFunc(out, func(n string) bool { return !strings.HasPrefix(n, "NODESMITH_") })
	slices.Sort(out)
	return out
}

// flagNameArg maps flag.FlagSet methods to the index of their name
// argument.
var flagNameArg = map[string]int{
	"Bool": 0, "Duration": 0, "Float64": 0, "Int": 0, "Int64": 0, "String": 0, "Uint": 0, "Uint64": 0,
	"Func": 0, "BoolFunc": 0,
	"BoolVar": 1, "DurationVar": 1, "Float64Var": 1, "IntVar": 1, "Int64Var": 1, "StringVar": 1,
	"UintVar": 1, "Uint64Var": 1, "Var": 1, "TextVar": 1,
}

// knownEnv returns the variables the Go code under dir reads: one per
// flag registered with a literal name (NODESMITH_ + upper-cased, - and .
// as _), plus every "NODESMITH_..." string literal (variables read
// directly, such as secret values).
func knownEnv(t *testing.T, dir string) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if v, err := strconv.Unquote(n.Value); err == nil && n.Kind == token.STRING && strings.HasPrefix(v, "NODESMITH_") {
					known[v] = true
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				i, ok := flagNameArg[sel.Sel.Name]
				if !ok || i >= len(n.Args) {
					return true
				}
				if lit, ok := n.Args[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if name, err := strconv.Unquote(lit.Value); err == nil {
						known["NODESMITH_"+strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(name))] = true
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(known) == 0 {
		t.Fatalf("no flags found under %s", dir)
	}
	return known
}

// TestNoSharedClusterID: no rendering gives lifecycle a fixed cluster id.
// Every cluster deployed from these manifests would share it, and each
// lifecycle's reconciler would take the other clusters' VMs for orphans;
// unset, lifecycle derives one from its cluster (k8s-<uid of kube-system>).
// An install that must keep an id sets it in its own overlay.
func TestNoSharedClusterID(t *testing.T) {
	for _, r := range renderings(t) {
		t.Run(r.name, func(t *testing.T) {
			s := r.render(t)
			w, c := workload(t, s, "Deployment", "lifecycle")
			if slices.Contains(nodesmithEnv(t, s, w, c), "NODESMITH_CLUSTER_ID") {
				t.Error("lifecycle gets NODESMITH_CLUSTER_ID: a constant every cluster deployed from these manifests shares")
			}
		})
	}
}
