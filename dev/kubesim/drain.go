package kubesim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// DefaultDrainTimeout bounds a drain whose kubectl call gave no --timeout
// (kubectl's own default waits forever; a hook has its own timeout, and a
// simulated VM must not keep a session open longer than that).
const DefaultDrainTimeout = 2 * time.Minute

// Drainer performs, against a real API server, the `kubectl drain` calls
// of the simulated VMs' hooks (simvm's kubectl shim records them; see
// cvmemu.WithDrain), the way kubectl does (k8s.io/kubectl/pkg/drain):
// cordon the Node, then evict its pods through the Eviction API, so a
// PodDisruptionBudget is honoured and every removal is an eviction the
// API server accounts for, never a bare delete. Like kubectl it refuses
// DaemonSet pods unless --ignore-daemonsets (which then skips them), pods
// with emptyDir volumes unless --delete-emptydir-data, and pods no
// controller manages unless --force; mirror pods are skipped. It then
// waits for the evicted pods to be gone, playing their kubelet (which
// confirms a graceful deletion once the containers stopped: these pods
// have none).
type Drainer struct {
	client kubernetes.Interface
	log    *slog.Logger
	// retryEvery is the wait after an eviction refused by a disruption
	// budget (429), as kubectl's 5 s, shorter for a simulation.
	retryEvery time.Duration
}

// NewDrainer returns a Drainer writing with client; log may be nil.
func NewDrainer(client kubernetes.Interface, log *slog.Logger) *Drainer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Drainer{client: client, log: log, retryEvery: time.Second}
}

// drainArgs are the kubectl drain arguments the Drainer understands.
type drainArgs struct {
	node                                    string
	ignoreDaemonSets, deleteEmptyDir, force bool
	// gracePeriod is --grace-period (-1: each pod's own).
	gracePeriod int64
	timeout     time.Duration
}

// parseDrainArgs reads kubectl's arguments after "drain"; an unknown flag
// is an error, as kubectl's.
func parseDrainArgs(args []string) (drainArgs, error) {
	a := drainArgs{gracePeriod: -1, timeout: DefaultDrainTimeout}
	boolFlag := func(v string, set bool) (bool, error) {
		if !set {
			return true, nil
		}
		return strconv.ParseBool(v)
	}
	for _, arg := range args {
		if !strings.HasPrefix(arg, "-") {
			if a.node != "" {
				return a, fmt.Errorf("kubectl drain takes one node, got %q and %q", a.node, arg)
			}
			a.node = arg
			continue
		}
		name, v, set := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		var err error
		switch name {
		case "ignore-daemonsets":
			a.ignoreDaemonSets, err = boolFlag(v, set)
		case "delete-emptydir-data", "delete-local-data":
			a.deleteEmptyDir, err = boolFlag(v, set)
		case "force":
			a.force, err = boolFlag(v, set)
		case "grace-period":
			a.gracePeriod, err = strconv.ParseInt(v, 10, 64)
		case "timeout":
			a.timeout, err = time.ParseDuration(v)
			if err == nil && a.timeout <= 0 {
				a.timeout = DefaultDrainTimeout
			}
		default:
			return a, fmt.Errorf("unknown flag: %s", arg)
		}
		if err != nil {
			return a, fmt.Errorf("invalid argument %q: %w", arg, err)
		}
	}
	if a.node == "" {
		return a, errors.New("USAGE: kubectl drain NODE [flags]: no node given")
	}
	return a, nil
}

// Drain performs `kubectl drain <args>` for the VM vmID (only logged).
func (d *Drainer) Drain(vmID string, args []string) error {
	a, err := parseDrainArgs(args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	if err := d.cordon(ctx, a.node); err != nil {
		return err
	}
	pods, err := d.podsToEvict(ctx, a)
	if err != nil {
		return err
	}
	for _, p := range pods {
		if err := d.evict(ctx, p, a.gracePeriod); err != nil {
			return err
		}
	}
	for _, p := range pods {
		if err := d.waitGone(ctx, p); err != nil {
			return err
		}
	}
	d.log.Info("kubectl drain: node drained", "vm", vmID, "node", a.node, "evicted", len(pods))
	return nil
}

// cordon marks the Node unschedulable.
func (d *Drainer) cordon(ctx context.Context, node string) error {
	nodes := d.client.CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.Spec.Unschedulable {
			return nil
		}
		n.Spec.Unschedulable = true
		_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("cordoning node %s: %w", node, err)
	}
	return nil
}

// podsToEvict lists the Node's pods and applies kubectl's filters.
func (d *Drainer) podsToEvict(ctx context.Context, a drainArgs) ([]corev1.Pod, error) {
	list, err := d.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", a.node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of node %s: %w", a.node, err)
	}
	var out []corev1.Pod
	var refused []string
	for _, p := range list.Items {
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		finished := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		ctrl := metav1.GetControllerOf(&p)
		switch {
		case ctrl != nil && ctrl.Kind == "DaemonSet":
			if !a.ignoreDaemonSets {
				refused = append(refused, p.Namespace+"/"+p.Name+" (DaemonSet-managed; use --ignore-daemonsets)")
			}
			continue
		case ctrl == nil && !finished && !a.force:
			refused = append(refused, p.Namespace+"/"+p.Name+" (declares no controller; use --force)")
			continue
		}
		if !a.deleteEmptyDir && !finished && hasEmptyDir(p) {
			refused = append(refused, p.Namespace+"/"+p.Name+" (uses emptyDir; use --delete-emptydir-data)")
			continue
		}
		out = append(out, p)
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("cannot delete pods: %s", strings.Join(refused, ", "))
	}
	return out, nil
}

func hasEmptyDir(p corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.EmptyDir != nil {
			return true
		}
	}
	return false
}

// evict asks the Eviction API to remove p, retrying while a disruption
// budget refuses (429), as kubectl does.
func (d *Drainer) evict(ctx context.Context, p corev1.Pod, grace int64) error {
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}},
	}
	if grace >= 0 {
		ev.DeleteOptions.GracePeriodSeconds = &grace
	}
	for {
		err := d.client.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev)
		switch {
		case err == nil:
			d.log.Info("kubectl drain: pod evicted", "pod", p.Namespace+"/"+p.Name, "node", p.Spec.NodeName)
			return nil
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			return nil // gone already, or another pod by that name by now
		case apierrors.IsTooManyRequests(err):
			d.log.Info("kubectl drain: eviction refused by a disruption budget, retrying", "pod", p.Namespace+"/"+p.Name, "err", err)
			select {
			case <-ctx.Done():
				return fmt.Errorf("evicting pod %s/%s: %w (last refusal: %w)", p.Namespace, p.Name, ctx.Err(), err)
			case <-time.After(d.retryEvery):
			}
		default:
			return fmt.Errorf("evicting pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
}

// waitGone waits for the evicted pod p to be deleted. A graceful deletion
// ends when the kubelet confirms it (a delete with grace period 0); the
// stand-in kubelet runs no containers, so it confirms at once.
func (d *Drainer) waitGone(ctx context.Context, p corev1.Pod) error {
	pods := d.client.CoreV1().Pods(p.Namespace)
	var last error // the last failed read, retried until ctx ends
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		have, gerr := pods.Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(gerr) {
			return true, nil
		}
		last = gerr
		switch {
		case gerr != nil:
			return false, nil //nolint:nilerr // a failed read is retried until ctx ends (kept in last)
		case have.UID != p.UID:
			return true, nil
		case have.DeletionTimestamp != nil:
			zero := int64(0)
			err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &p.UID}})
			return err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err), nil
		}
		return false, nil
	})
	if err != nil {
		if last != nil {
			return fmt.Errorf("waiting for pod %s/%s to be deleted: %w (last read: %w)", p.Namespace, p.Name, err, last)
		}
		return fmt.Errorf("waiting for pod %s/%s to be deleted: %w", p.Namespace, p.Name, err)
	}
	return nil
}
