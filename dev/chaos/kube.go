package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodesmith/nodesmith/dev/kubesim"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
)

// The Kubernetes side of a run with -cluster=kubernetes: a real
// kube-apiserver (tools/kube/kubetest), lifecycle's namespace and
// ServiceAccount (dev/kubesim), and the two things a real cluster does
// that nodesmith relies on: kubelets registering a Node when `kubeadm
// join` runs on a VM (dev/kubesim's stand-ins), and a cloud node
// controller deleting the Node of a VM that is gone (below).
const (
	kubeNamespace = kubesim.Namespace
	leaseName     = "nodesmith-lifecycle"
	// lease timing: short, so a killed leader is replaced within seconds.
	leaseDuration = 6 * time.Second
	renewDeadline = 4 * time.Second
	retryPeriod   = time.Second
	// nodeGoneGrace is how long the cloud node controller leaves the Node
	// of a gone VM alone: lifecycle deletes it right after the VM's
	// termination, and the controller only catches what it did not.
	nodeGoneGrace = 20 * time.Second
	// lifecycleTokenExpiry is how long lifecycle's token is valid: longer
	// than any run (the harness does not refresh it).
	lifecycleTokenExpiry = 24 * time.Hour
)

type kubeSide struct {
	cluster *kubetest.Cluster
	// cs is the admin client of the harness's stand-ins (kubelets, cloud
	// node controller) and checks.
	cs kubernetes.Interface
	// lifecycleKubeconfig is the kubeconfig file of lifecycle's
	// ServiceAccount, which the lifecycle processes use.
	lifecycleKubeconfig string
	// kubelets register the Nodes of the VMs' joins.
	kubelets *kubesim.Kubelets
	// removed counts Nodes the cloud node controller deleted because
	// lifecycle had not (their VM was gone).
	removed atomic.Int64

	mu sync.Mutex
	// handovers are the Lease hand-overs seen after the leader kills.
	handovers []string
}

// startKube starts etcd and kube-apiserver and gives lifecycle its
// namespace and ServiceAccount.
func (r *run) startKube(ctx context.Context) (stop func(), err error) {
	dir := filepath.Join(r.dir, "kube")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c, stop, err := kubetest.StartStandalone(ctx, dir, r.logf)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		stop()
		return nil, err
	}
	kubeconfig, err := kubesim.LifecycleAccess(ctx, c, leaseName, lifecycleTokenExpiry)
	if err != nil {
		stop()
		return nil, err
	}
	r.kube = &kubeSide{cluster: c, cs: cs, lifecycleKubeconfig: kubeconfig,
		kubelets: kubesim.NewKubelets(cs, kubesim.KubeletOptions{Machines: kubesim.EmulatorMachines(r.w.Emulator)})}
	r.logf("kube-apiserver %s on %s (logs in %s); lifecycle runs as ServiceAccount %s/%s with the kustomize base's RBAC",
		kubetest.KubernetesVersion, c.Host, dir, kubeNamespace, kubesim.LifecycleAccount)
	return stop, nil
}

// registerNodes is the kubelets: every join the simulated VMs report
// becomes a Node in the API server (see kubesim.Kubelets).
func (r *run) registerNodes(ctx context.Context) {
	r.kube.kubelets.Run(ctx, r.w.Cluster)
}

// nodeController is the cloud node controller: every second it deletes
// the Nodes whose VM the cloud has not listed (or listed terminating) for
// nodeGoneGrace. Lifecycle deletes the Nodes of the instances it deletes
// itself; this catches what it did not (and counts it).
func (r *run) nodeController(ctx context.Context) {
	goneSince := map[types.UID]time.Time{}
	for sleep(ctx, time.Second) == nil {
		gone, err := r.kube.nodesOfGoneVMs(ctx, r.w.Emulator.ListVMs())
		if err != nil {
			continue
		}
		now, still := time.Now(), map[types.UID]time.Time{}
		for _, n := range gone {
			since, ok := goneSince[n.UID]
			if !ok {
				since = now
			}
			still[n.UID] = since
			if now.Sub(since) < nodeGoneGrace {
				continue
			}
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := r.kube.cs.CoreV1().Nodes().Delete(dctx, n.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &n.UID}})
			cancel()
			if err == nil {
				r.kube.removed.Add(1)
				r.logf("cloud node controller: deleted Node %s (providerID %s), its VM gone for %s", n.Name, n.Spec.ProviderID, nodeGoneGrace)
			}
		}
		goneSince = still
	}
}

// nodesOfGoneVMs lists the Nodes whose providerID no live VM reported.
func (k *kubeSide) nodesOfGoneVMs(ctx context.Context, vms []cvmemu.VMInfo) ([]corev1.Node, error) {
	live := map[string]bool{}
	for _, vm := range vms {
		if vm.State != cvmemu.StateTerminating && vm.ProviderID != "" {
			live[vm.ProviderID] = true
		}
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := k.cs.CoreV1().Nodes().List(lctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var gone []corev1.Node
	for _, n := range list.Items {
		if !live[n.Spec.ProviderID] {
			gone = append(gone, n)
		}
	}
	return gone, nil
}

// leader returns the lifecycle replica holding the Lease and its identity
// (the first replica and "" when none does, or without Kubernetes).
func (r *run) leader(ctx context.Context) (*svc, string) {
	if r.kube == nil {
		return r.lifecycles[0], ""
	}
	holder := r.kube.holder(ctx)
	for _, s := range r.lifecycles {
		if strings.HasPrefix(holder, s.name+"_") {
			return s, holder
		}
	}
	return r.lifecycles[0], holder
}

// holder is the Lease's holder identity ("" when unknown).
func (k *kubeSide) holder(ctx context.Context) string {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := k.cs.CoordinationV1().Leases(kubeNamespace).Get(cctx, leaseName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// watchHandover waits for the Lease to leave the killed leader (holder,
// killed at since) and records who took it and how long it took.
func (r *run) watchHandover(ctx context.Context, holder string, since time.Time) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if h := r.kube.holder(ctx); h != "" && h != holder {
			msg := fmt.Sprintf("%s -> %s in %.1fs", holder, h, time.Since(since).Seconds())
			r.kube.mu.Lock()
			r.kube.handovers = append(r.kube.handovers, msg)
			r.kube.mu.Unlock()
			r.logf("Lease handed over: %s", msg)
			return
		}
		if sleep(ctx, 200*time.Millisecond) != nil {
			return
		}
	}
	r.logf("Lease still held by %s a minute after it was killed", holder)
}

// handoverNote describes the observed hand-overs for the fault table.
func (k *kubeSide) handoverNote() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.handovers) == 0 {
		return "no hand-over observed"
	}
	return "hand-overs: " + strings.Join(k.handovers, ", ")
}

// group labels lifecycle puts on every Node of a group (its own two and
// the node template's, see harness.ConfigYAML).
func groupLabels(group, instanceID string) map[string]string {
	return map[string]string{
		"nodesmith.io/node-group":        group,
		"nodesmith.io/instance-id":       instanceID,
		"nodesmith.io/pool":              group,
		"node-role.kubernetes.io/worker": "",
	}
}

// checkNodes verifies the Kubernetes invariants: every Running instance
// has exactly one Ready Node with its providerID and its group's labels,
// every kill of the leader handed the Lease over, and no Node remains for
// a VM the cloud no longer lists.
func (r *run) checkNodes(ctx context.Context, records []*statev1.Instance, vms []cvmemu.VMInfo, violate func(string, ...any)) (bad int, err error) {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := r.kube.cs.CoreV1().Nodes().List(lctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("listing Nodes: %w", err)
	}
	byPID := map[string][]corev1.Node{}
	for _, n := range list.Items {
		byPID[n.Spec.ProviderID] = append(byPID[n.Spec.ProviderID], n)
	}
	for _, in := range records {
		if in.GetState() != statev1.InstanceState_INSTANCE_STATE_RUNNING || in.GetReleased() {
			continue
		}
		nodes := byPID[in.GetProviderId()]
		if len(nodes) != 1 {
			bad++
			violate("Running instance %s (%s) has %d Nodes with providerID %s", in.GetId(), in.GetGroup(), len(nodes), in.GetProviderId())
			continue
		}
		n := nodes[0]
		if kubesim.ReadyStatus(n.Status.Conditions) != corev1.ConditionTrue {
			bad++
			violate("Running instance %s: Node %s is not Ready", in.GetId(), n.Name)
		}
		var wrong []string
		for k, v := range groupLabels(in.GetGroup(), in.GetId()) {
			if got, ok := n.Labels[k]; !ok || got != v {
				wrong = append(wrong, fmt.Sprintf("%s=%q (want %q)", k, got, v))
			}
		}
		if len(wrong) > 0 {
			bad++
			sort.Strings(wrong)
			violate("Running instance %s: Node %s lacks its group's labels: %v", in.GetId(), n.Name, wrong)
		}
	}
	kills := 0
	for _, s := range r.lifecycles {
		kills += s.kills
	}
	r.kube.mu.Lock()
	handovers := len(r.kube.handovers)
	r.kube.mu.Unlock()
	if handovers < kills {
		bad += kills - handovers
		violate("the lifecycle leader was killed %d times but the Lease changed hands %d times", kills, handovers)
	}
	gone, err := r.kube.nodesOfGoneVMs(ctx, vms)
	if err != nil {
		return bad, fmt.Errorf("listing Nodes: %w", err)
	}
	for _, n := range gone {
		bad++
		violate("Node %s (providerID %s) remains for a VM the cloud no longer lists", n.Name, n.Spec.ProviderID)
	}
	return bad, nil
}
