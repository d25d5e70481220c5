package kubesim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
)

// testPod is a Pod of namespace ns labelled app=drain, managed by a
// controller of kind (none when kind is "").
func testPod(ns, name, kind string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "drain"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if kind != "" {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name + "-owner", UID: types.UID(fmt.Sprintf("0f0f0f0f-0000-4000-8000-%012d", rand.IntN(1e9))), Controller: &yes}}
	}
	return p
}

// testNamespace creates a namespace of its own, with the ServiceAccount the
// absent controller-manager would have made.
func testNamespace(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	ctx := context.Background()
	ns := fmt.Sprintf("drain-%d", rand.IntN(1e9))
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// TestDrainEvictsAsKubectlDoes: the drain cordons the Node, refuses what
// kubectl refuses without the flag that allows it, and otherwise removes
// the Node's pods through the Eviction API (each one recorded by the
// disruption budget covering it), leaving DaemonSet pods and other Nodes'
// pods alone.
func TestDrainEvictsAsKubectlDoes(t *testing.T) {
	c := kubetest.Start(t) // skips under -short
	cs := c.Clientset(t)
	ctx := context.Background()
	ns := testNamespace(t, cs)
	node := "drain-" + ns
	for _, n := range []string{node, node + "-other"} {
		if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
		_ = cs.CoreV1().Nodes().Delete(context.Background(), node+"-other", metav1.DeleteOptions{})
	})
	one := intstr.FromInt32(1)
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "budget"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "drain"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := AllowDisruptions(ctx, cs, ns, "budget", 10); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ name, kind, node string }{
		{"web", "ReplicaSet", node},
		{"job", "", node},
		{"agent", "DaemonSet", node},
		{"elsewhere", "ReplicaSet", node + "-other"},
	} {
		if _, err := RunPod(ctx, cs, testPod(ns, p.name, p.kind), p.node); err != nil {
			t.Fatal(err)
		}
	}

	d := NewDrainer(cs, nil)
	err := d.Drain("ins-1", []string{node, "--ignore-daemonsets"})
	if err == nil || !strings.Contains(err.Error(), ns+"/job (declares no controller; use --force)") {
		t.Fatalf("drain of an unmanaged pod without --force: %v", err)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil || !n.Spec.Unschedulable {
		t.Fatalf("the Node is not cordoned: %v", err)
	}
	if err := d.Drain("ins-1", []string{node, "--ignore-daemonsets", "--force", "--bogus"}); err == nil || !strings.Contains(err.Error(), "unknown flag: --bogus") {
		t.Fatalf("unknown flag: %v", err)
	}
	if err := d.Drain("ins-1", []string{node, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=30s"}); err != nil {
		t.Fatal(err)
	}

	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, p := range list.Items {
		left = append(left, p.Name)
	}
	slices.Sort(left)
	if fmt.Sprint(left) != "[agent elsewhere]" {
		t.Errorf("pods left %v, want the DaemonSet's and the other Node's", left)
	}
	pdb, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "budget", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var evicted []string
	for name := range pdb.Status.DisruptedPods {
		evicted = append(evicted, name)
	}
	slices.Sort(evicted)
	if fmt.Sprint(evicted) != "[job web]" || pdb.Status.DisruptionsAllowed != 8 {
		t.Errorf("budget recorded evictions %v, %d allowed left; want [job web], 8", evicted, pdb.Status.DisruptionsAllowed)
	}

	// A budget that allows nothing holds the drain until its timeout.
	if _, err := RunPod(ctx, cs, testPod(ns, "held", "ReplicaSet"), node+"-other"); err != nil {
		t.Fatal(err)
	}
	if err := AllowDisruptions(ctx, cs, ns, "budget", 0); err != nil {
		t.Fatal(err)
	}
	err = d.Drain("ins-2", []string{node + "-other", "--ignore-daemonsets", "--timeout=2s"})
	if err == nil || !strings.Contains(err.Error(), "evicting pod "+ns+"/") {
		t.Fatalf("drain against a budget allowing nothing: %v", err)
	}
	if _, err := cs.CoreV1().Pods(ns).Get(ctx, "held", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Error("a pod was removed although its budget allowed no disruption")
	}
}
