package manifests_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
)

// crdGroups are API groups of custom resources that a bare API server
// does not serve; their objects are checked by the structural tests only.
var crdGroups = map[string]bool{"cert-manager.io": true, "monitoring.coreos.com": true}

// TestAgainstAPIServer applies every rendering to a real kube-apiserver
// with a server-side dry run: schema validation, defaulting, admission
// (Pod Security "restricted" included, as warnings on pod templates) and
// RBAC's escalation checks all run. Any error or warning fails.
func TestAgainstAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	w := &warnings{}
	cfg := c.RESTConfig()
	cfg.WarningHandler = w
	a := newApplier(t, cfg)
	cs := c.Clientset(t)

	for _, r := range renderings(t) {
		t.Run(r.name, func(t *testing.T) {
			s := r.render(t)
			ns := restrictedNamespace(t, cs)
			applied := 0
			for _, o := range s.Objects {
				w.reset()
				err := a.apply(t.Context(), o, ns, true)
				var skip errSkipped
				if errors.As(err, &skip) {
					continue
				}
				if err != nil {
					t.Errorf("%s %s: %v", o.GetKind(), o.GetName(), err)
					continue
				}
				applied++
				for _, msg := range w.take() {
					t.Errorf("%s %s: warning: %s", o.GetKind(), o.GetName(), msg)
				}
			}
			if applied == 0 {
				t.Fatal("nothing was applied")
			}
		})
	}
}

// TestRBACLeastPrivilege applies the prod rendering's ServiceAccounts and
// RBAC for real and asks the API server's authorizer what each account may
// do: exactly what its service needs, nothing else. lifecycle's grants are
// then exercised with its own token, as the pod would use them.
func TestRBACLeastPrivilege(t *testing.T) {
	c := kubetest.Start(t)
	cs := c.Clientset(t)
	prod := renderings(t)[1]
	if prod.name != "overlays/prod" {
		t.Fatalf("renderings()[1] is %s", prod.name)
	}
	s := prod.render(t)
	ns := c.Namespace(t)
	// Cluster-scoped names (and those in "default") get the namespace as
	// a suffix so the test can run next to another rendering on the same
	// server.
	if _, err := c.ApplyRBAC(t.Context(), s.Objects, ns); err != nil {
		t.Fatal(err)
	}

	type access struct {
		account, verb, group, resource, name string
		namespace                            string // "" for cluster scope; "own" for ns
		want                                 bool
	}
	own := "own"
	// Each account's grants come before its denials: a denial is only
	// meaningful once the grants are visible to the authorizer (it reads
	// RBAC through an informer), which eventually waits for.
	cases := []access{
		// lifecycle: Nodes cluster wide, but neither create nor update.
		{"lifecycle", "watch", "", "nodes", "", "", true},
		{"lifecycle", "patch", "", "nodes", "", "", true},
		{"lifecycle", "delete", "", "nodes", "", "", true},
		{"lifecycle", "create", "", "nodes", "", "", false},
		{"lifecycle", "update", "", "nodes", "", "", false},
		{"lifecycle", "update", "", "nodes/status", "", "", false},
		// Its Lease, ConfigMaps and Events in its namespace only.
		{"lifecycle", "create", "coordination.k8s.io", "leases", "", own, true},
		{"lifecycle", "update", "coordination.k8s.io", "leases", "nodesmith-lifecycle", own, true},
		{"lifecycle", "create", "coordination.k8s.io", "leases", "", "kube-system", false},
		{"lifecycle", "delete", "coordination.k8s.io", "leases", "nodesmith-lifecycle", own, false},
		{"lifecycle", "watch", "", "configmaps", "", own, true},
		{"lifecycle", "create", "", "configmaps", "", own, true},
		{"lifecycle", "update", "", "configmaps", "nodegroup-status", own, true},
		{"lifecycle", "delete", "", "configmaps", "", own, false},
		{"lifecycle", "get", "", "configmaps", "", "kube-system", false},
		{"lifecycle", "create", "", "events", "", own, true},
		{"lifecycle", "patch", "events.k8s.io", "events", "", own, true},
		{"lifecycle", "create", "", "events", "", "default", true}, // Node events live in default
		{"lifecycle", "create", "", "pods", "", "default", false},
		{"lifecycle", "get", "", "secrets", "", own, false},
		{"lifecycle", "list", "", "pods", "", "", false},
		// The node agent: get and patch Nodes (RBAC cannot narrow it to its
		// own), nothing else.
		{"node-agent", "get", "", "nodes", "", "", true},
		{"node-agent", "patch", "", "nodes", "", "", true},
		{"node-agent", "list", "", "nodes", "", "", false},
		{"node-agent", "watch", "", "nodes", "", "", false},
		{"node-agent", "update", "", "nodes", "", "", false},
		{"node-agent", "delete", "", "nodes", "", "", false},
		{"node-agent", "patch", "", "nodes/status", "", "", false},
		{"node-agent", "create", "", "pods/eviction", "", "default", false},
		{"node-agent", "get", "", "secrets", "", own, false},
		// The gateway and the workers have no Kubernetes API access.
		{"api-gateway", "list", "", "nodes", "", "", false},
		{"api-gateway", "get", "", "configmaps", "", own, false},
		{"cloud-adapter", "get", "", "secrets", "", own, false},
		{"hook-runner", "list", "", "pods", "", own, false},
		{"nats", "get", "", "configmaps", "", own, false},
		// Cluster Autoscaler: its standard grants, its Lease and status
		// ConfigMap in this namespace.
		{"cluster-autoscaler", "list", "", "pods", "", "", true},
		{"cluster-autoscaler", "update", "", "nodes", "", "", true},
		{"cluster-autoscaler", "create", "", "pods/eviction", "", "default", true},
		{"cluster-autoscaler", "update", "coordination.k8s.io", "leases", "cluster-autoscaler", own, true},
		{"cluster-autoscaler", "update", "coordination.k8s.io", "leases", "nodesmith-lifecycle", own, false},
		{"cluster-autoscaler", "update", "", "configmaps", "cluster-autoscaler-status", own, true},
		{"cluster-autoscaler", "update", "", "configmaps", "lifecycle-config", own, false},
		{"cluster-autoscaler", "delete", "", "nodes", "", "", false},
		{"cluster-autoscaler", "get", "", "secrets", "", own, false},
	}
	for _, tc := range cases {
		resNS := tc.namespace
		if resNS == own {
			resNS = ns
		}
		resource, sub, _ := strings.Cut(tc.resource, "/")
		user := fmt.Sprintf("system:serviceaccount:%s:%s", ns, tc.account)
		eventually(t, func(ctx context.Context) error {
			review, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{
					User:   user,
					Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
					ResourceAttributes: &authorizationv1.ResourceAttributes{
						Namespace: resNS, Verb: tc.verb, Group: tc.group, Resource: resource, Subresource: sub, Name: tc.name,
					},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if review.Status.Allowed != tc.want {
				return fmt.Errorf("%s may %s %s %s/%s in %q: %v, want %v (%s)",
					tc.account, tc.verb, tc.group, tc.resource, tc.name, resNS, review.Status.Allowed, tc.want, review.Status.Reason)
			}
			return nil
		})
	}

	// lifecycle with its own bound token: label a Node, take a Lease.
	lc, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, ns, "lifecycle"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := cs.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rbac-" + ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.CoreV1().Nodes().Patch(t.Context(), node.Name, types.StrategicMergePatchType,
		[]byte(`{"metadata":{"labels":{"nodesmith.io/node-group":"general"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("lifecycle patching a Node: %v", err)
	}
	if _, err := lc.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{}); err == nil {
		t.Error("lifecycle could list Secrets")
	}
	if err := lc.CoreV1().Nodes().Delete(t.Context(), node.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("lifecycle deleting a Node: %v", err)
	}
}

// errSkipped marks an object of a kind the server does not serve (a
// custom resource whose CRD is not installed).
type errSkipped struct{ kind string }

func (e errSkipped) Error() string { return "skipped " + e.kind }

type applier struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

func newApplier(t *testing.T, cfg *rest.Config) *applier {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

// apply server-side applies o, placing namespaced objects in ns.
func (a *applier) apply(ctx context.Context, o *unstructured.Unstructured, ns string, dryRun bool) error {
	gvk := o.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		if meta.IsNoMatchError(err) && crdGroups[gvk.Group] {
			return errSkipped{kind: gvk.Kind}
		}
		return err
	}
	o = o.DeepCopy()
	var ri dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		o.SetNamespace(ns)
		ri = a.dyn.Resource(m.Resource).Namespace(ns)
	}
	opts := metav1.ApplyOptions{FieldManager: "nodesmith-manifests-test", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = ri.Apply(ctx, o.GetName(), o, opts)
	return err
}

// restrictedNamespace creates a namespace that enforces and warns about
// the "restricted" Pod Security Standard, like base/namespace.yaml.
func restrictedNamespace(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	ns, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "manifests-",
		Labels: map[string]string{
			"pod-security.kubernetes.io/enforce": "restricted",
			"pod-security.kubernetes.io/warn":    "restricted",
			"pod-security.kubernetes.io/audit":   "restricted",
		},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// warnings collects the API server's Warning headers.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warnings) reset() { w.take() }

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.msgs
	w.msgs = nil
	return out
}

// eventually retries f for a while: RBAC grants reach the authorizer
// through an informer shortly after they are stored.
func eventually(t *testing.T, f func(context.Context) error) {
	t.Helper()
	var err error
	for range 100 {
		if err = f(t.Context()); err == nil {
			return
		}
		if t.Context().Err() != nil {
			break
		}
		select {
		case <-t.Context().Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Error(err)
}
