package kubetest_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
)

// TestVersionsAgree keeps the three pins in step: the kube-apiserver the
// harness builds, the build module's k8s.io/kubernetes requirement and the
// client-go this module (and nodesmith's adapters) compile against.
func TestVersionsAgree(t *testing.T) {
	info, err := kubetest.LocateAPIServer()
	if err != nil {
		t.Fatal(err)
	}
	if info.BuildDir == "" {
		t.Skipf("%s is set; the build module is not used", kubetest.EnvAPIServer)
	}
	gomod, err := os.ReadFile(filepath.Join(info.BuildDir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "require k8s.io/kubernetes " + kubetest.KubernetesVersion; !strings.Contains(string(gomod), want) {
		t.Errorf("%s/go.mod does not contain %q", info.BuildDir, want)
	}
	// Every staging module must be replaced by the matching v0.x tag.
	staging := "v0" + strings.TrimPrefix(kubetest.KubernetesVersion, "v1")
	for _, m := range regexp.MustCompile(`(?m)^\s*(k8s\.io/\S+) => (\S+) (\S+)$`).FindAllStringSubmatch(string(gomod), -1) {
		if m[1] != m[2] || m[3] != staging {
			t.Errorf("build module: replace %s => %s %s, want %s => %s %s", m[1], m[2], m[3], m[1], m[1], staging)
		}
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build info")
	}
	for _, dep := range bi.Deps {
		if dep.Path == "k8s.io/client-go" && dep.Version != staging {
			t.Errorf("k8s.io/client-go is %s, want %s to match kube-apiserver %s", dep.Version, staging, kubetest.KubernetesVersion)
		}
	}
	if !strings.Contains(filepath.Base(filepath.Dir(info.Path)), kubetest.KubernetesVersion) {
		t.Errorf("cache path %s does not name the version", info.Path)
	}
}

func TestCluster(t *testing.T) {
	c := kubetest.Start(t)
	cs := c.Clientset(t)

	t.Run("version", func(t *testing.T) {
		v, err := cs.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != kubetest.KubernetesVersion {
			t.Errorf("server version %s, want %s", v.GitVersion, kubetest.KubernetesVersion)
		}
	})

	t.Run("kubeconfig", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		kc, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kc.CoreV1().Namespaces().Get(t.Context(), metav1.NamespaceSystem, metav1.GetOptions{}); err != nil {
			t.Fatalf("kube-system through the kubeconfig file: %v", err)
		}
	})

	t.Run("node create, patch, watch", func(t *testing.T) {
		ctx := t.Context()
		nodes := cs.CoreV1().Nodes()
		created, err := nodes.Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "kubetest-node-1", Labels: map[string]string{"a": "1"}},
			Spec:       corev1.NodeSpec{ProviderID: "externalgrpc://tencentcloud/dev/ap-guangzhou/ins-1"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := nodes.Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", created.Name).String(),
			ResourceVersion: created.ResourceVersion,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()

		// A label and a taint, as lifecycle applies a group's node
		// template; then Ready, as a kubelet would report it.
		patched, err := nodes.Patch(ctx, created.Name, types.StrategicMergePatchType,
			[]byte(`{"metadata":{"labels":{"nodesmith.io/node-group":"workers"}},"spec":{"taints":[{"key":"dedicated","value":"workers","effect":"NoSchedule"}]}}`),
			metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if patched.Labels["a"] != "1" || patched.Labels["nodesmith.io/node-group"] != "workers" || !hasTaint(patched, "dedicated") {
			t.Fatalf("patched node: labels %v taints %v", patched.Labels, patched.Spec.Taints)
		}
		if _, err := nodes.Patch(ctx, created.Name, types.StrategicMergePatchType,
			[]byte(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","lastHeartbeatTime":null}]}}`),
			metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		if err := nodes.Delete(ctx, created.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}

		var got []string
		deadline := time.After(30 * time.Second)
		for len(got) < 3 {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatalf("watch closed after %v", got)
				}
				n, isNode := ev.Object.(*corev1.Node)
				if !isNode {
					t.Fatalf("watch event %s carries %T", ev.Type, ev.Object)
				}
				switch {
				case ev.Type == watch.Modified && len(got) == 0 && n.Labels["nodesmith.io/node-group"] == "workers":
					got = append(got, "labelled")
				case ev.Type == watch.Modified && len(got) == 1 && ready(n):
					got = append(got, "ready")
				case ev.Type == watch.Deleted && len(got) == 2:
					got = append(got, "deleted")
				default:
					t.Fatalf("unexpected watch event %s after %v: labels %v ready %v", ev.Type, got, n.Labels, ready(n))
				}
			case <-deadline:
				t.Fatalf("watch saw only %v", got)
			}
		}
	})

	t.Run("lease with optimistic concurrency", func(t *testing.T) {
		ctx := t.Context()
		ns := c.Namespace(t)
		leases := cs.CoordinationV1().Leases(ns)
		lease, err := leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "nodesmith-lifecycle"},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To("lifecycle-0"),
				LeaseDurationSeconds: ptr.To[int32](15),
				AcquireTime:          &metav1.MicroTime{Time: time.Now()},
				RenewTime:            &metav1.MicroTime{Time: time.Now()},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stale := lease.DeepCopy()
		lease.Spec.HolderIdentity = ptr.To("lifecycle-1")
		if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		stale.Spec.HolderIdentity = ptr.To("lifecycle-2")
		if _, err := leases.Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			t.Fatalf("update with a stale resourceVersion: got %v, want a conflict", err)
		}
		got, err := leases.Get(ctx, lease.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h := ptr.Deref(got.Spec.HolderIdentity, ""); h != "lifecycle-1" {
			t.Fatalf("holder %q, want lifecycle-1", h)
		}
	})

	t.Run("service account is subject to RBAC", func(t *testing.T) {
		ctx := t.Context()
		ns := c.Namespace(t)
		sa, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, ns, "reader"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("listing nodes without a role: got %v, want forbidden", err)
		}
		name := "kubetest-node-reader-" + ns
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "reader"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The RBAC authorizer reads roles through an informer: the grant
		// takes effect shortly after it is stored.
		eventually(t, 30*time.Second, func(ctx context.Context) error {
			_, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return err
		})
		if _, err := sa.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("listing secrets with a node-reader role: got %v, want forbidden", err)
		}
	})

	t.Run("rendered RBAC applied to a namespace grants a ServiceAccount kubeconfig exactly its rules", func(t *testing.T) {
		ctx := t.Context()
		ns := c.Namespace(t)
		// As a kustomize rendering has them, in namespace "rendered": a
		// ClusterRole, a Role in the namespace and one in "default", their
		// bindings, the ServiceAccount and a workload ApplyRBAC ignores.
		objs := parseObjects(t, `
apiVersion: v1
kind: ServiceAccount
metadata: {name: app, namespace: rendered}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: app}
rules: [{apiGroups: [""], resources: [nodes], verbs: [list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: app}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: app}
subjects: [{kind: ServiceAccount, name: app, namespace: rendered}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: app, namespace: rendered}
rules: [{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [create]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: app, namespace: rendered}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: app}
subjects: [{kind: ServiceAccount, name: app, namespace: rendered}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: app-events, namespace: default}
rules: [{apiGroups: [""], resources: [events], verbs: [create]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: app-events, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: app-events}
subjects: [{kind: ServiceAccount, name: app, namespace: rendered}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ignored, namespace: rendered}
`)
		n, err := c.ApplyRBAC(ctx, objs, ns)
		if err != nil {
			t.Fatal(err)
		}
		if n != 7 {
			t.Fatalf("ApplyRBAC applied %d objects, want 7", n)
		}
		if _, err := cs.RbacV1().ClusterRoles().Get(ctx, "app-"+ns, metav1.GetOptions{}); err != nil {
			t.Fatalf("the ClusterRole under its suffixed name: %v", err)
		}
		if _, err := cs.RbacV1().Roles(metav1.NamespaceDefault).Get(ctx, "app-events-"+ns, metav1.GetOptions{}); err != nil {
			t.Fatalf("the Role in default under its suffixed name: %v", err)
		}
		if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "ignored", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the ConfigMap: got %v, want not found (not RBAC)", err)
		}

		path, err := c.ServiceAccountKubeconfig(ctx, ns, "app", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(path) != filepath.Dir(c.Kubeconfig) {
			t.Errorf("ServiceAccount kubeconfig %s is not next to the admin one %s", path, c.Kubeconfig)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		sa, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		lease := func(ns string) error {
			_, err := sa.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{GenerateName: "app-"}}, metav1.CreateOptions{})
			return err
		}
		event := func(ns string) error {
			_, err := sa.CoreV1().Events(ns).Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{GenerateName: "app-"},
				InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "n1", APIVersion: "v1"},
				Reason:         "Test", Message: "test", Type: corev1.EventTypeNormal,
			}, metav1.CreateOptions{})
			return err
		}
		// Grants first: once they are visible to the authorizer (an
		// informer), the denials are meaningful.
		eventually(t, 30*time.Second, func(ctx context.Context) error {
			_, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return err
		})
		eventually(t, 30*time.Second, func(context.Context) error { return lease(ns) })
		eventually(t, 30*time.Second, func(context.Context) error { return event(metav1.NamespaceDefault) })
		other := c.Namespace(t)
		if err := lease(other); !apierrors.IsForbidden(err) {
			t.Errorf("a Lease in another namespace: got %v, want forbidden", err)
		}
		if err := event(ns); !apierrors.IsForbidden(err) {
			t.Errorf("an Event in its own namespace (granted only in default): got %v, want forbidden", err)
		}
		if _, err := sa.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("listing ConfigMaps: got %v, want forbidden", err)
		}
	})
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, taint := range n.Spec.Taints {
		if taint.Key == key {
			return true
		}
	}
	return false
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func eventually(t *testing.T, timeout time.Duration, f func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f(t.Context())
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after %s: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// parseObjects decodes a multi-document YAML stream into objects.
func parseObjects(t *testing.T, stream string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(stream, "\n---\n") {
		o := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &o.Object); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}
