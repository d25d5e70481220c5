package kubesim

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
	"github.com/nodesmith/nodesmith/tools/simcluster"
)

// eventually polls cond until it holds, failing the test after a generous
// deadline with the last reason cond gave.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 60s: %s", what, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func taintKeys(n *corev1.Node) map[string]corev1.TaintEffect {
	m := map[string]corev1.TaintEffect{}
	for _, t := range n.Spec.Taints {
		m[t.Key] = t.Effect
	}
	return m
}

// nodeIs waits until the Node name exists and check accepts it.
func nodeIs(t *testing.T, cs kubernetes.Interface, name, what string, check func(*corev1.Node) string) *corev1.Node {
	t.Helper()
	var n *corev1.Node
	eventually(t, what, func() (bool, string) {
		got, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		n = got
		if why := check(got); why != "" {
			return false, why
		}
		return true, ""
	})
	return n
}

// TestKubeletsRegisterReadyAndStopNodesAsKubeletAndTheNodeController runs
// the stand-ins against a real kube-apiserver and checks each stage of a
// node's life as a real cluster shows it.
func TestKubeletsRegisterReadyAndStopNodesAsKubeletAndTheNodeController(t *testing.T) {
	c := kubetest.Start(t) // skips under -short
	cs := c.Clientset(t)
	cluster := simcluster.New(simcluster.Options{ReadyDelay: -1}) // readiness set by the test
	defer cluster.Close()

	const pid = "tencentcloud:///ap-guangzhou-3/ins-abc"
	machines := func(providerID string) (Machine, bool) {
		if providerID != pid {
			return Machine{}, false
		}
		return Machine{InternalIP: "127.77.0.5", Region: "ap-guangzhou", Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4", CPU: 2, MemoryGiB: 4}, true
	}
	k := NewKubelets(cs, KubeletOptions{Machines: machines})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); k.Run(ctx, cluster) }()
	defer func() { cancel(); <-done }()

	// A join without a providerID is not one of nodesmith's: left out.
	if err := cluster.Register("no-provider", ""); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Register("n1", pid); err != nil {
		t.Fatal(err)
	}
	n := nodeIs(t, cs, "n1", "registered NotReady with the not-ready taint", func(n *corev1.Node) string {
		if ReadyStatus(n.Status.Conditions) != corev1.ConditionFalse || taintKeys(n)[TaintNotReady] != corev1.TaintEffectNoSchedule {
			return fmt.Sprintf("ready=%s taints=%v", ReadyStatus(n.Status.Conditions), n.Spec.Taints)
		}
		return ""
	})
	if n.Spec.ProviderID != pid {
		t.Errorf("providerID %q, want %q", n.Spec.ProviderID, pid)
	}
	for key, want := range map[string]string{
		"kubernetes.io/hostname":           "n1",
		"kubernetes.io/os":                 "linux",
		"kubernetes.io/arch":               "amd64",
		"node.kubernetes.io/instance-type": "S5.MEDIUM4",
		"topology.kubernetes.io/zone":      "ap-guangzhou-3",
		"topology.kubernetes.io/region":    "ap-guangzhou",
	} {
		if got := n.Labels[key]; got != want {
			t.Errorf("label %s = %q, want %q", key, got, want)
		}
	}
	addrs := map[corev1.NodeAddressType]string{}
	for _, a := range n.Status.Addresses {
		addrs[a.Type] = a.Address
	}
	if addrs[corev1.NodeInternalIP] != "127.77.0.5" || addrs[corev1.NodeHostName] != "n1" {
		t.Errorf("addresses %v", n.Status.Addresses)
	}
	for name, want := range map[string]corev1.ResourceList{
		"capacity":    {corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("110")},
		"allocatable": {corev1.ResourceCPU: resource.MustParse("1900m"), corev1.ResourceMemory: resource.MustParse("3584Mi"), corev1.ResourcePods: resource.MustParse("110")},
	} {
		got := n.Status.Capacity
		if name == "allocatable" {
			got = n.Status.Allocatable
		}
		for r, q := range want {
			if g := got[r]; g.Cmp(q) != 0 {
				t.Errorf("%s %s = %s, want %s", name, r, g.String(), q.String())
			}
		}
	}

	// A group's taint, as lifecycle patches it: the stand-ins keep it.
	patch := []byte(`{"spec":{"taints":[{"key":"node.kubernetes.io/not-ready","effect":"NoSchedule"},{"key":"dedicated","value":"workers","effect":"NoSchedule"}]}}`)
	if _, err := cs.CoreV1().Nodes().Patch(context.Background(), "n1", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.SetReady("n1", true); err != nil {
		t.Fatal(err)
	}
	nodeIs(t, cs, "n1", "Ready without the not-ready taint, the group's taint kept", func(n *corev1.Node) string {
		tk := taintKeys(n)
		if ReadyStatus(n.Status.Conditions) != corev1.ConditionTrue || tk[TaintNotReady] != "" || tk["dedicated"] == "" {
			return fmt.Sprintf("ready=%s taints=%v", ReadyStatus(n.Status.Conditions), n.Spec.Taints)
		}
		return ""
	})

	// kubeadm reset (or the VM's end): the kubelet stops.
	if !cluster.MarkNotReadyIfProvider("n1", pid) {
		t.Fatal("node n1 not marked NotReady")
	}
	nodeIs(t, cs, "n1", "Unknown with the unreachable taint", func(n *corev1.Node) string {
		tk := taintKeys(n)
		if ReadyStatus(n.Status.Conditions) != corev1.ConditionUnknown || tk[TaintUnreachable] != corev1.TaintEffectNoSchedule || tk["dedicated"] == "" {
			return fmt.Sprintf("ready=%s taints=%v", ReadyStatus(n.Status.Conditions), n.Spec.Taints)
		}
		return ""
	})

	// The kubelet comes back: the controller lifts the unreachable taint.
	if err := cluster.SetReady("n1", true); err != nil {
		t.Fatal(err)
	}
	nodeIs(t, cs, "n1", "Ready again without the unreachable taint", func(n *corev1.Node) string {
		if ReadyStatus(n.Status.Conditions) != corev1.ConditionTrue || taintKeys(n)[TaintUnreachable] != "" {
			return fmt.Sprintf("ready=%s taints=%v", ReadyStatus(n.Status.Conditions), n.Spec.Taints)
		}
		return ""
	})

	// Lifecycle deletes the Node, then the kubelet stops: it does not
	// bring the Node back. A new join registers its Node.
	if err := cs.CoreV1().Nodes().Delete(context.Background(), "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !cluster.MarkNotReadyIfProvider("n1", pid) {
		t.Fatal("node n1 not marked NotReady")
	}
	if err := cluster.Register("n2", pid); err != nil {
		t.Fatal(err)
	}
	nodeIs(t, cs, "n2", "a later join registered", func(*corev1.Node) string { return "" })
	// Events are handled in order: n1's stop was handled before n2's join.
	if _, err := cs.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a stopped kubelet brought its deleted Node back: %v", err)
	}
	if _, err := cs.CoreV1().Nodes().Get(context.Background(), "no-provider", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a join without a providerID registered a Node: %v", err)
	}
	if got := k.Registered(); got != 2 {
		t.Errorf("Registered() = %d, want 2", got)
	}
}
