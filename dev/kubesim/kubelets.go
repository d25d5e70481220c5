package kubesim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodesmith/nodesmith/tools/cvmemu"
	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
	"github.com/nodesmith/nodesmith/tools/simcluster"
)

// Taints of a Node whose kubelet is not Ready, as the node lifecycle
// controller sets them.
const (
	// TaintNotReady marks a Node that registered but is not Ready yet (the
	// kubelet registers with it; the controller lifts it once Ready).
	TaintNotReady = "node.kubernetes.io/not-ready"
	// TaintUnreachable marks a Node whose kubelet stopped posting status.
	TaintUnreachable = "node.kubernetes.io/unreachable"
)

// Machine is what a kubelet knows of the machine it runs on.
type Machine struct {
	InternalIP   string
	Region, Zone string
	InstanceType string
	// CPU in cores and memory in GiB; 0 when unknown (then the Node
	// reports no CPU or memory capacity).
	CPU, MemoryGiB int64
}

// Machines finds the machine behind a providerID (false: none).
type Machines func(providerID string) (Machine, bool)

// VMLister lists the VMs of a CVM emulator (cvmemu.Emulator, cvmemu.Server).
type VMLister interface{ ListVMs() []cvmemu.VMInfo }

// EmulatorMachines finds machines among the emulator's VMs: the one that
// reported joining with the providerID (the emulator records it before it
// registers the node), with the shape the emulator reports for it.
func EmulatorMachines(vms VMLister) Machines {
	return func(providerID string) (Machine, bool) {
		for _, v := range vms.ListVMs() {
			if v.ProviderID != providerID || v.State == cvmemu.StateTerminating {
				continue
			}
			return Machine{InternalIP: v.PrivateIP, Region: v.Region, Zone: v.Zone, InstanceType: v.InstanceType, CPU: v.CPU, MemoryGiB: v.MemoryMiB / 1024}, true
		}
		return Machine{}, false
	}
}

// DefaultReserved is what the stand-in kubelets keep for the system
// (kube-reserved plus system-reserved): a 2-core 4 GiB machine has 1900m
// CPU and 3584Mi memory allocatable, as the node template of `make run`'s
// built-in configuration says.
func DefaultReserved() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("100m"),
		corev1.ResourceMemory: resource.MustParse("512Mi"),
	}
}

// KubeletOptions configures Kubelets.
type KubeletOptions struct {
	// Machines describes the machine behind each joining node; nil, or a
	// machine it does not find, registers the Node without addresses,
	// capacity, zone or instance type.
	Machines Machines
	// Reserved is subtracted from the capacity to make the allocatable
	// resources; nil means DefaultReserved.
	Reserved corev1.ResourceList
	// OS and Arch are the machines' (labels kubernetes.io/os and
	// kubernetes.io/arch); empty means linux and amd64.
	OS, Arch string
	// Logger receives what the stand-ins do; nil discards it.
	Logger *slog.Logger
}

// Kubelets plays, against a real API server, the kubelets of the nodes of
// a simulated cluster (tools/simcluster: the simulated VMs' joins and
// their kubelets' readiness) and what a cluster's node lifecycle
// controller does to their Nodes:
//
//   - a node registers (`kubeadm join`): its Node is created as kubelet
//     creates it, with spec.providerID, the InternalIP and Hostname
//     addresses, capacity and allocatable from the machine's shape, the
//     labels kubelet sets (kubernetes.io/hostname, kubernetes.io/os and
//     arch) and those of the cloud (node.kubernetes.io/instance-type,
//     topology.kubernetes.io/zone and region), Ready=False and the
//     node.kubernetes.io/not-ready:NoSchedule taint;
//   - it becomes Ready: Ready=True, and the not-ready taint is lifted;
//   - its kubelet stops (`kubeadm reset`, the VM's termination): Ready
//     turns Unknown and the node.kubernetes.io/unreachable:NoSchedule
//     taint is set, as the controller does when a kubelet stops posting
//     status.
//
// Like a real cluster, it deletes no Node: lifecycle deletes the Node of
// an instance it deleted. A join without a providerID (no --provider-id
// for the kubelet) is left out: every hook of nodesmith gives one.
type Kubelets struct {
	client kubernetes.Interface
	opts   KubeletOptions
	log    *slog.Logger
	// registered counts the Nodes created.
	registered atomic.Int64
}

// NewKubelets returns the stand-ins, writing with client.
func NewKubelets(client kubernetes.Interface, opts KubeletOptions) *Kubelets {
	if opts.Reserved == nil {
		opts.Reserved = DefaultReserved()
	}
	if opts.OS == "" {
		opts.OS = "linux"
	}
	if opts.Arch == "" {
		opts.Arch = "amd64"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Kubelets{client: client, opts: opts, log: log}
}

// Registered is the number of Nodes the stand-ins created.
func (k *Kubelets) Registered() int64 { return k.registered.Load() }

// kubeletState is what a node's kubelet is doing.
type kubeletState int

const (
	// starting: registered, not Ready yet.
	starting kubeletState = iota
	// running: Ready.
	running
	// stopped: was Ready, is no longer (reset, VM gone).
	stopped
)

// Run mirrors every node of cluster into the API server, in the order of
// the cluster's events, each retried until it is stored; it returns when
// ctx ends or the cluster closes.
func (k *Kubelets) Run(ctx context.Context, cluster *simcluster.Cluster) {
	wasReady := map[string]bool{}
	for ev := range cluster.Watch(ctx) {
		name := ev.Node.Name
		if ev.Type == simcluster.Deleted {
			delete(wasReady, name)
			continue
		}
		if ev.Node.ProviderID == "" {
			continue
		}
		st := starting
		switch {
		case ev.Node.Ready:
			st = running
		case wasReady[name] && ev.Type == simcluster.Modified:
			st = stopped
		}
		wasReady[name] = ev.Node.Ready
		for attempt := 0; ; attempt++ {
			err := k.sync(ctx, ev.Node, st)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			if attempt%10 == 0 {
				k.log.Warn("kubelet stand-in: updating Node (retrying)", "node", name, "err", err)
			}
			if sleep(ctx, 500*time.Millisecond) != nil {
				return
			}
		}
	}
}

// sync brings the Node of n to what its kubelet in state st and the node
// lifecycle controller make of it, creating it unless the kubelet stopped.
func (k *Kubelets) sync(ctx context.Context, n simcluster.Node, st kubeletState) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nodes := k.client.CoreV1().Nodes()
	have, err := nodes.Get(ctx, n.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && st == stopped:
		// Deleted (by lifecycle): a stopped kubelet does not bring it back.
		return nil
	case apierrors.IsNotFound(err):
		if have, err = nodes.Create(ctx, k.newNode(n), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("registering: %w", err)
		}
		k.registered.Add(1)
		k.log.Info("kubelet stand-in: Node registered", "node", n.Name, "providerID", n.ProviderID)
	case err != nil:
		return err
	case have.Spec.ProviderID != n.ProviderID:
		if st == stopped {
			return nil // another machine's Node by now
		}
		// The name is taken by another machine's Node: kubelet cannot
		// change a providerID, the stale Node has to go first.
		if err := nodes.Delete(ctx, n.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &have.UID}}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return errors.New("deleted a stale Node with another providerID")
	}

	// The kubelet's status.
	if conds := conditions(st, have.Status.Conditions); conds != nil {
		upd := have.DeepCopy()
		upd.Status.Conditions = conds
		if have, err = nodes.UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsNotFound(err) && st == stopped {
				return nil
			}
			return fmt.Errorf("updating status: %w", err)
		}
	}
	// The node lifecycle controller's taints, re-read on a conflict with
	// lifecycle's patches.
	for first := true; ; first = false {
		if !first {
			if have, err = nodes.Get(ctx, n.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		taints, changed := controllerTaints(st, have.Spec.Taints)
		if !changed {
			return nil
		}
		upd := have.DeepCopy()
		upd.Spec.Taints = taints
		_, err = nodes.Update(ctx, upd, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			if apierrors.IsNotFound(err) && st == stopped {
				return nil
			}
			return err
		}
	}
}

// newNode is the Node a starting kubelet registers.
func (k *Kubelets) newNode(n simcluster.Node) *corev1.Node {
	m, known := Machine{}, false
	if k.opts.Machines != nil {
		m, known = k.opts.Machines(n.ProviderID)
	}
	if !known {
		k.log.Warn("kubelet stand-in: no machine for the node's providerID; registering it without addresses, capacity or zone", "node", n.Name, "providerID", n.ProviderID)
	}
	labels := map[string]string{
		corev1.LabelHostname:      n.Name,
		corev1.LabelOSStable:      k.opts.OS,
		corev1.LabelArchStable:    k.opts.Arch,
		"beta.kubernetes.io/os":   k.opts.OS,
		"beta.kubernetes.io/arch": k.opts.Arch,
	}
	for key, v := range map[string]string{
		corev1.LabelInstanceTypeStable: m.InstanceType,
		corev1.LabelTopologyZone:       m.Zone,
		corev1.LabelTopologyRegion:     m.Region,
	} {
		if v != "" {
			labels[key] = v
		}
	}
	addresses := []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: n.Name}}
	if m.InternalIP != "" {
		addresses = append([]corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: m.InternalIP}}, addresses...)
	}
	capacity := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}
	if m.CPU > 0 && m.MemoryGiB > 0 {
		capacity[corev1.ResourceCPU] = *resource.NewQuantity(m.CPU, resource.DecimalSI)
		capacity[corev1.ResourceMemory] = *resource.NewQuantity(m.MemoryGiB<<30, resource.BinarySI)
	}
	allocatable := corev1.ResourceList{}
	for name, q := range capacity {
		a := q.DeepCopy()
		if r, ok := k.opts.Reserved[name]; ok {
			a.Sub(r)
		}
		allocatable[name] = a
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels},
		Spec: corev1.NodeSpec{
			ProviderID: n.ProviderID,
			Taints:     []corev1.Taint{{Key: TaintNotReady, Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: allocatable,
			Addresses:   addresses,
			Conditions:  conditions(starting, nil),
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion:  kubetest.KubernetesVersion,
				OperatingSystem: k.opts.OS,
				Architecture:    k.opts.Arch,
			},
		},
	}
}

// conditions returns the Node conditions of a kubelet in state st, or nil
// when have already says so.
func conditions(st kubeletState, have []corev1.NodeCondition) []corev1.NodeCondition {
	ready, reason, msg := corev1.ConditionFalse, "KubeletNotReady", "kubelet is starting"
	pressure := corev1.ConditionFalse
	switch st {
	case running:
		ready, reason, msg = corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"
	case stopped:
		// The node lifecycle controller's words when a kubelet falls silent.
		ready, reason, msg = corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status."
		pressure = corev1.ConditionUnknown
	}
	if ReadyStatus(have) == ready {
		return nil
	}
	now := metav1.Now()
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return []corev1.NodeCondition{
		cond(corev1.NodeMemoryPressure, pressure, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
		cond(corev1.NodeDiskPressure, pressure, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
		cond(corev1.NodePIDPressure, pressure, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
		cond(corev1.NodeReady, ready, reason, msg),
	}
}

// controllerTaints returns the taints with the node lifecycle controller's
// own set as state st asks, and whether that changed them. Other taints
// (the group's, lifecycle's) are kept.
func controllerTaints(st kubeletState, have []corev1.Taint) ([]corev1.Taint, bool) {
	want := map[string]bool{TaintNotReady: st == starting, TaintUnreachable: st == stopped}
	out := slices.DeleteFunc(slices.Clone(have), func(t corev1.Taint) bool {
		return (t.Key == TaintNotReady || t.Key == TaintUnreachable) && !want[t.Key]
	})
	for _, key := range []string{TaintNotReady, TaintUnreachable} {
		if want[key] && !slices.ContainsFunc(out, func(t corev1.Taint) bool { return t.Key == key }) {
			out = append(out, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
		}
	}
	return out, !slices.Equal(out, have)
}

// ReadyStatus is the status of a Node's Ready condition (Unknown when it
// has none).
func ReadyStatus(conds []corev1.NodeCondition) corev1.ConditionStatus {
	for _, c := range conds {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}
