package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
	"github.com/nodesmith/nodesmith/tools/kube/manifests"
	"github.com/nodesmith/nodesmith/tools/simcluster"
)

// The Kubernetes side of a run with -cluster=kubernetes: a real
// kube-apiserver (tools/kube/kubetest), the namespace of lifecycle's Lease,
// and the two things a real cluster does that nodesmith relies on: a
// kubelet registering a Node when `kubeadm join` runs on a VM, and a cloud
// node controller deleting the Node of a VM that is gone.
const (
	kubeNamespace = "nodesmith"
	leaseName     = "nodesmith-lifecycle"
	// lease timing: short, so a killed leader is replaced within seconds.
	leaseDuration = 6 * time.Second
	renewDeadline = 4 * time.Second
	retryPeriod   = time.Second
	// nodeGoneGrace is how long the cloud node controller leaves the Node
	// of a gone VM alone: lifecycle deletes it right after the VM's
	// termination, and the controller only catches what it did not.
	nodeGoneGrace = 20 * time.Second
	// lifecycleAccount is lifecycle's ServiceAccount in the kustomize
	// base (whose namespace is kubeNamespace too).
	lifecycleAccount = "lifecycle"
	// lifecycleTokenExpiry is how long its token is valid: longer than
	// any run (the harness does not refresh it).
	lifecycleTokenExpiry = 24 * time.Hour
)

type kubeSide struct {
	cluster *kubetest.Cluster
	// cs is the admin client of the harness's stand-ins (kubelet, cloud
	// node controller) and checks.
	cs kubernetes.Interface
	// lifecycleKubeconfig is the kubeconfig file of lifecycle's
	// ServiceAccount, which the lifecycle processes use.
	lifecycleKubeconfig string
	// registered counts Nodes created by the kubelet stand-in; removed
	// counts Nodes the cloud node controller deleted because lifecycle had
	// not (their VM was gone).
	registered, removed atomic.Int64

	mu sync.Mutex
	// handovers are the Lease hand-overs seen after the leader kills.
	handovers []string
}

// startKube starts etcd and kube-apiserver and creates lifecycle's namespace.
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
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = cs.CoreV1().Namespaces().Create(cctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kubeNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		stop()
		return nil, fmt.Errorf("creating namespace %s: %w", kubeNamespace, err)
	}
	kubeconfig, err := lifecycleAccess(ctx, c)
	if err != nil {
		stop()
		return nil, err
	}
	r.kube = &kubeSide{cluster: c, cs: cs, lifecycleKubeconfig: kubeconfig}
	r.logf("kube-apiserver %s on %s (logs in %s); lifecycle runs as ServiceAccount %s/%s with the kustomize base's RBAC",
		kubetest.KubernetesVersion, c.Host, dir, kubeNamespace, lifecycleAccount)
	return stop, nil
}

// lifecycleAccess gives lifecycle what a deployment of the kustomize base
// gives its pods, and nothing more: the ServiceAccount and RBAC of
// deploy/kustomize/base (rendered, not copied) in kubeNamespace, and a
// kubeconfig file with a token of that ServiceAccount. It returns the
// file's path once the grants are in effect (the authorizer reads them
// through an informer), so lifecycle's first calls are not refused.
func lifecycleAccess(ctx context.Context, c *kubetest.Cluster) (string, error) {
	root, err := harness.RepoRoot(ctx)
	if err != nil {
		return "", err
	}
	objs, err := manifests.Render(filepath.Join(root, "deploy", "kustomize", "base"))
	if err != nil {
		return "", err
	}
	n, err := c.ApplyRBAC(ctx, manifests.NewSet(objs).OfApp("lifecycle"), kubeNamespace)
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "", errors.New("the kustomize base has no ServiceAccount or RBAC labelled app.kubernetes.io/name=lifecycle")
	}
	kubeconfig, err := c.ServiceAccountKubeconfig(ctx, kubeNamespace, lifecycleAccount, lifecycleTokenExpiry)
	if err != nil {
		return "", err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return "", err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		// A missing Lease (NotFound) means the read was authorized.
		_, err := cs.CoordinationV1().Leases(kubeNamespace).Get(wctx, leaseName, metav1.GetOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			_, err = cs.CoreV1().Nodes().List(wctx, metav1.ListOptions{Limit: 1})
		}
		if err == nil {
			return kubeconfig, nil
		}
		if sleep(wctx, 100*time.Millisecond) != nil {
			return "", fmt.Errorf("lifecycle's RBAC not in effect after 30s: %w", err)
		}
	}
}

// registerNodes is the kubelets: every join the simulated VMs report
// (simcluster events, NotReady then Ready) becomes the same Node in the
// API server, retried until it is stored. A join without the kubelet's
// --provider-id (nothing in /etc/default/kubelet) would register a Node
// without a providerID; the run's hooks always set one, so such a Node is
// not one of the run's and is left out.
func (r *run) registerNodes(ctx context.Context) {
	for ev := range r.w.Cluster.Watch(ctx) {
		if ev.Type == simcluster.Deleted || ev.Node.ProviderID == "" {
			continue
		}
		// A kubelet registers its Node when it starts (the join: Added,
		// or a re-join: Modified to Ready) and afterwards only reports
		// status: a Node lifecycle deleted after `kubeadm reset` (NotReady)
		// stays deleted.
		register := ev.Type == simcluster.Added || ev.Node.Ready
		for attempt := 0; ; attempt++ {
			err := r.kube.ensureNode(ctx, ev.Node, register)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			if attempt%10 == 0 {
				r.logf("kubelet of node %s: registering: %v (retrying)", ev.Node.Name, err)
			}
			if sleep(ctx, 500*time.Millisecond) != nil {
				return
			}
		}
	}
}

// ensureNode updates the Node of a joined VM (its Ready condition, as
// kubelet reports it), creating it with its providerID when register is
// set.
func (k *kubeSide) ensureNode(ctx context.Context, n simcluster.Node, register bool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nodes := k.cs.CoreV1().Nodes()
	status := corev1.ConditionFalse
	if n.Ready {
		status = corev1.ConditionTrue
	}
	cond := corev1.NodeCondition{Type: corev1.NodeReady, Status: status, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}
	have, err := nodes.Get(ctx, n.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && !register:
		return nil
	case apierrors.IsNotFound(err):
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{corev1.LabelHostname: n.Name}},
			Spec:       corev1.NodeSpec{ProviderID: n.ProviderID},
			Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{cond}},
		}
		created, err := nodes.Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		k.registered.Add(1)
		if readyStatus(created) == status {
			return nil
		}
		have = created
	case err != nil:
		return err
	case have.Spec.ProviderID != n.ProviderID:
		// The name is taken by another machine's Node: kubelet cannot
		// change a providerID, the stale Node has to go first.
		if err := nodes.Delete(ctx, n.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &have.UID}}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return errors.New("replaced a Node with another providerID")
	case readyStatus(have) == status:
		return nil
	}
	upd := have.DeepCopy()
	upd.Status.Conditions = []corev1.NodeCondition{cond}
	_, err = nodes.UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) && !register {
		return nil // deleted meanwhile
	}
	return err
}

func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
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
		if readyStatus(&n) != corev1.ConditionTrue {
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
