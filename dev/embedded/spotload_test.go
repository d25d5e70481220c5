package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/nodesmith/nodesmith/dev/kubesim"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// TestKubeModeSpotReclaimUnderLoad is issue 16's acceptance for spot
// reclaims: a spot group of 6 Running nodes carrying pods (real Pods bound
// to the Nodes, covered by a PodDisruptionBudget), node agents on every
// node, a Cluster-Autoscaler-like load raising the target while the
// emulator reclaims 2 VMs with a 60 s notice. Each reclaimed node is
// drained through the Eviction API before its VM disappears (the budget
// records every eviction; a watcher checks that the VM is never seen gone
// while the API server still holds its pods), the instance ends Deleted
// as interrupted, its replacement reaches Running, the group's target
// never drops and its Running count never falls more than the reclaimed
// ones below its high-water mark, and no pod is removed without an
// eviction.
func TestKubeModeSpotReclaimUnderLoad(t *testing.T) {
	const (
		initial   = 6
		reclaimed = 2
		notice    = 60 // seconds
		podsEach  = 2
	)
	var emu *cvmemu.Server
	emulatorHook = func(e *cvmemu.Server) { emu = e }
	t.Cleanup(func() { emulatorHook = nil })
	s, rc, cs := startKubeStack(t, true)
	ctx := context.Background()
	c := s.client(t)
	api := restClient{t: t, base: "http://" + s.addrs.REST, token: s.addrs.AdminToken}

	kubeEventually(t, "the gateway knows the group", func() (bool, string) {
		res := call(t, func(ctx context.Context) (*pb.NodeGroupsResponse, error) {
			return c.NodeGroups(ctx, &pb.NodeGroupsRequest{})
		})
		for _, g := range res.GetNodeGroups() {
			if g.GetId() == "workers" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("groups %v", res.GetNodeGroups())
	})
	call(t, func(ctx context.Context) (*pb.NodeGroupIncreaseSizeResponse, error) {
		return c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "workers", Delta: initial})
	})
	var pids []string
	for _, in := range waitRunning(t, c, "workers", initial) {
		pids = append(pids, in.GetId())
	}
	nodes := waitNodesReady(t, cs, pids...)

	// The workload: per node, pods of a ReplicaSet (the drain evicts them)
	// and a DaemonSet's pod (the hook's --ignore-daemonsets leaves it),
	// under a budget the test keeps open, as the disruption controller
	// would for a healthy application.
	one := intstr.FromInt32(1)
	if _, err := cs.PolicyV1().PodDisruptionBudgets(metav1.NamespaceDefault).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "spotload"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spotload"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	must(t, kubesim.AllowDisruptions(ctx, cs, metav1.NamespaceDefault, "spotload", 100))
	podsOf := map[string][]string{} // node name -> ReplicaSet pod names
	var daemonPods []string
	for i, pid := range pids {
		node := nodes[pid].Name
		for j := range podsEach {
			name := fmt.Sprintf("web-%d-%d", i, j)
			if _, err := kubesim.RunPod(ctx, cs, loadPod(name, "ReplicaSet", "web"), node); err != nil {
				t.Fatal(err)
			}
			podsOf[node] = append(podsOf[node], name)
		}
		name := fmt.Sprintf("agent-%d", i)
		if _, err := kubesim.RunPod(ctx, cs, loadPod(name, "DaemonSet", "agent"), node); err != nil {
			t.Fatal(err)
		}
		daemonPods = append(daemonPods, name)
		startNodeAgent(t, s, rc, node, pid)
	}
	victims := pids[:reclaimed]

	w := watchSpotGroup(c, emu, cs, victims, nodes, reclaimed)
	t.Cleanup(w.stop)

	// Cluster Autoscaler asks for more while the reclaims come.
	call(t, func(ctx context.Context) (*pb.NodeGroupIncreaseSizeResponse, error) {
		return c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "workers", Delta: 2})
	})
	terms := map[string]time.Time{}
	for _, pid := range victims {
		terms[pid] = scheduleReclaim(t, s, pid, notice)
	}
	call(t, func(ctx context.Context) (*pb.NodeGroupIncreaseSizeResponse, error) {
		return c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "workers", Delta: 1})
	})
	const target = initial + 3

	// The end state: the reclaimed instances Deleted, the target's worth
	// Running (replacements and the load's new ones).
	type inst struct {
		ID         string `json:"id"`
		ProviderID string `json:"providerID"`
		State      string `json:"state"`
	}
	closed := map[string]inst{}
	kubeEventually(t, "the reclaimed instances Deleted, the target Running", func() (bool, string) {
		var list struct {
			Items []inst `json:"items"`
		}
		must(t, json.Unmarshal(api.must(200, "GET", "/api/v1/instances?group=workers&limit=100", "").body, &list))
		running := 0
		for _, in := range list.Items {
			switch {
			case slices.Contains(victims, in.ProviderID):
				closed[in.ProviderID] = in
			case in.State == "RUNNING":
				running++
			}
		}
		for _, pid := range victims {
			if closed[pid].State != "DELETED" {
				return false, fmt.Sprintf("%s is %s", pid, closed[pid].State)
			}
		}
		return running == target, fmt.Sprintf("%d Running, want %d: %+v", running, target, list.Items)
	})
	kubeEventually(t, "the reclaimed VMs seen gone by the watcher", func() (bool, string) {
		n := w.goneCount()
		return n == reclaimed, fmt.Sprintf("%d of %d", n, reclaimed)
	})
	w.stop()

	for _, pid := range victims {
		hist := checkInterruptedHistory(t, api, closed[pid].ID)
		for _, h := range hist {
			if h.To == "DELETED" && h.At.After(terms[pid]) {
				t.Errorf("%s closed at %s, after its termination time %s", pid, h.At, terms[pid])
			}
		}
	}
	w.report(t)

	// Every pod gone was evicted (the budget recorded it), and exactly the
	// reclaimed nodes' ReplicaSet pods are gone.
	pdb, err := cs.PolicyV1().PodDisruptionBudgets(metav1.NamespaceDefault).Get(ctx, "spotload", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=spotload"})
	if err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	for _, p := range list.Items {
		present[p.Name] = true
	}
	var wantGone []string
	for _, pid := range victims {
		wantGone = append(wantGone, podsOf[nodes[pid].Name]...)
	}
	for _, pid := range pids {
		for _, name := range podsOf[nodes[pid].Name] {
			_, evicted := pdb.Status.DisruptedPods[name]
			gone := !present[name]
			switch {
			case gone && !evicted:
				t.Errorf("pod %s was deleted without an eviction", name)
			case gone != slices.Contains(wantGone, name):
				t.Errorf("pod %s (node %s): gone=%v, want it gone only if its node was reclaimed", name, nodes[pid].Name, gone)
			}
		}
	}
	for _, name := range daemonPods {
		if !present[name] {
			t.Errorf("DaemonSet pod %s was removed; the drain ignores DaemonSets", name)
		}
	}
	if n := len(pdb.Status.DisruptedPods); n != len(wantGone) {
		t.Errorf("%d evictions recorded (%v), want %d", n, pdb.Status.DisruptedPods, len(wantGone))
	}
}

// loadPod is a Pod of the load (label app=spotload) managed by a
// controller of kind.
func loadPod(name, kind, owner string) *corev1.Pod {
	yes := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: metav1.NamespaceDefault, Name: name, Labels: map[string]string{"app": "spotload"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: kind, Name: owner, Controller: &yes,
				UID: types.UID("5b0710ad-0000-4000-8000-" + map[string]string{"ReplicaSet": "000000000001", "DaemonSet": "000000000002"}[kind]),
			}},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
}

// spotWatch samples, until stopped, the group (Running count and target
// through CA's gRPC API) and the reclaimed VMs in the emulator.
type spotWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu sync.Mutex
	// problems found while sampling; samples counts the group samples.
	problems        []string
	samples         int
	peak, minMargin int
	// goneChecked: the reclaimed VMs seen gone, with their pods checked.
	goneChecked map[string]bool
}

// watchSpotGroup starts the sampling. A VM of victims seen TERMINATING or
// gone is checked at once against the API server: its Node's pods must be
// gone already (the read comes after the VM was seen gone, so a pod still
// listed was there after the VM disappeared). The group's Running count
// must stay at least its high-water mark minus reclaimed, and its target
// must never drop.
func watchSpotGroup(c pb.CloudProviderClient, emu *cvmemu.Server, cs kubernetes.Interface, victims []string, nodes map[string]corev1.Node, reclaimed int) *spotWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &spotWatch{cancel: cancel, done: make(chan struct{}), minMargin: 1 << 30, goneChecked: map[string]bool{}}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		lastTarget := int32(0)
		for {
			w.checkVMs(ctx, emu, cs, victims, nodes)
			if res, err := c.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: "workers"}); err == nil {
				running := 0
				for _, in := range res.GetInstances() {
					if in.GetStatus().GetInstanceState() == pb.InstanceStatus_instanceRunning {
						running++
					}
				}
				w.mu.Lock()
				w.samples++
				w.peak = max(w.peak, running)
				w.minMargin = min(w.minMargin, running-(w.peak-reclaimed))
				if running < w.peak-reclaimed {
					w.problems = append(w.problems, fmt.Sprintf("%d Running after a high of %d: more than the %d reclaimed below", running, w.peak, reclaimed))
				}
				w.mu.Unlock()
			}
			if g, err := c.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: "workers"}); err == nil {
				if g.GetTargetSize() < lastTarget {
					w.addProblem(fmt.Sprintf("target dropped from %d to %d", lastTarget, g.GetTargetSize()))
				}
				lastTarget = g.GetTargetSize()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *spotWatch) addProblem(p string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.problems = append(w.problems, p)
}

// checkVMs checks the victims newly seen gone.
func (w *spotWatch) checkVMs(ctx context.Context, emu *cvmemu.Server, cs kubernetes.Interface, victims []string, nodes map[string]corev1.Node) {
	state := map[string]string{}
	for _, v := range emu.ListVMs() {
		state[v.ID] = v.State
	}
	for _, pid := range victims {
		w.mu.Lock()
		checked := w.goneChecked[pid]
		w.mu.Unlock()
		if checked {
			continue
		}
		if st, ok := state[cloudID(pid)]; ok && st != cvmemu.StateTerminating {
			continue
		}
		// Seen gone: a consistent read from here on.
		list, err := cs.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			LabelSelector: "app=spotload",
			FieldSelector: "spec.nodeName=" + nodes[pid].Name,
		})
		if err != nil {
			if ctx.Err() == nil {
				w.addProblem(fmt.Sprintf("listing the pods of %s: %v", nodes[pid].Name, err))
			}
			continue
		}
		w.mu.Lock()
		w.goneChecked[pid] = true
		w.mu.Unlock()
		for _, p := range list.Items {
			if ctrl := metav1.GetControllerOf(&p); ctrl == nil || ctrl.Kind != "DaemonSet" {
				w.addProblem(fmt.Sprintf("VM %s gone while its node %s still held pod %s", pid, nodes[pid].Name, p.Name))
			}
		}
	}
}

// goneCount is the number of victims seen gone and checked.
func (w *spotWatch) goneCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.goneChecked)
}

// stop ends the sampling and waits for it (idempotent).
func (w *spotWatch) stop() {
	w.cancel()
	<-w.done
}

// report fails the test with what the sampling found.
func (w *spotWatch) report(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.samples < 10 {
		t.Errorf("only %d samples of the group: the watcher saw too little to tell", w.samples)
	}
	for pid := range w.goneChecked {
		t.Logf("VM %s seen gone; its pods checked then", pid)
	}
	t.Logf("%d group samples, Running high %d, smallest margin above high-minus-reclaimed %d", w.samples, w.peak, w.minMargin)
	for _, p := range w.problems {
		t.Error(p)
	}
}
