package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

var _ ports.Cluster = (*Cluster)(nil)

// Cluster implements ports.Cluster with a Node informer and patches.
type Cluster struct {
	client kubernetes.Interface
	log    *slog.Logger
	// Resync re-delivers every Node as an update this often (0: never; the
	// app's dispatcher is level-triggered and needs no resync).
	Resync time.Duration
}

// NewCluster returns the cluster adapter.
func NewCluster(client kubernetes.Interface, log *slog.Logger) *Cluster {
	if log == nil {
		log = slog.Default()
	}
	return &Cluster{client: client, log: log}
}

// Watch implements ports.Cluster: a shared informer on Nodes delivers the
// existing Nodes as NodeAdded, then NodesSynced once they all were, then
// the changes. The informer re-lists and re-watches by itself when the
// watch breaks, so Watch returns only when ctx ends.
func (c *Cluster) Watch(ctx context.Context, fn func(ports.NodeEvent)) error {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.client.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.client.CoreV1().Nodes().Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, c.Resync, cache.Indexers{})
	// Keep only what lifecycle reads: Nodes carry image lists and managed
	// fields that would cost megabytes per thousand Nodes.
	if err := inf.SetTransform(trimNode); err != nil {
		return fmt.Errorf("node informer: %w", err)
	}
	// The initial list is delivered from the informer's store once it is
	// synced, all at once: the informer's own delivery may interleave an
	// update of one Node with the initial adds of others, and the app must
	// see every Node before it trusts an absence. Handler calls before that
	// are dropped: the store is updated before handlers are called, so the
	// snapshot already holds what they carried. The lock orders the
	// snapshot with the live events (a change may be delivered twice, as
	// the snapshot and as an update: harmless).
	var (
		mu   sync.Mutex
		live bool
	)
	deliver := func(ev ports.NodeEvent) {
		mu.Lock()
		defer mu.Unlock()
		if live {
			fn(ev)
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*corev1.Node); ok {
				deliver(ports.NodeEvent{Type: ports.NodeAdded, Node: toNode(n)})
			}
		},
		UpdateFunc: func(_, obj any) {
			if n, ok := obj.(*corev1.Node); ok {
				deliver(ports.NodeEvent{Type: ports.NodeUpdated, Node: toNode(n)})
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				deliver(ports.NodeEvent{Type: ports.NodeDeleted, Node: toNode(n)})
			}
		},
	})
	if err != nil {
		return fmt.Errorf("node informer: %w", err)
	}
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		inf.RunWithContext(ictx)
	}()
	if cache.WaitForCacheSync(ictx.Done(), inf.HasSynced) {
		mu.Lock()
		nodes := inf.GetStore().List()
		for _, obj := range nodes {
			if n, ok := obj.(*corev1.Node); ok {
				fn(ports.NodeEvent{Type: ports.NodeAdded, Node: toNode(n)})
			}
		}
		fn(ports.NodeEvent{Type: ports.NodesSynced})
		live = true
		mu.Unlock()
		c.log.Info("node informer synced", "nodes", len(nodes))
	}
	<-ictx.Done()
	cancel()
	<-stopped
	return nil
}

// trimNode keeps the fields toNode reads.
func trimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion,
			Labels: n.Labels, Annotations: n.Annotations,
		},
		Spec: corev1.NodeSpec{ProviderID: n.Spec.ProviderID, Taints: n.Spec.Taints},
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			out.Status.Addresses = []corev1.NodeAddress{a}
			break
		}
	}
	return out, nil
}

// toNode maps a Node to the port's view.
func toNode(n *corev1.Node) ports.Node {
	out := ports.Node{
		Name:        n.Name,
		ProviderID:  n.Spec.ProviderID,
		Labels:      n.Labels,
		Annotations: n.Annotations,
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Ready = c.Status == corev1.ConditionTrue
		}
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			out.InternalIP = a.Address
			break
		}
	}
	for _, t := range n.Spec.Taints {
		out.Taints = append(out.Taints, ports.Taint{Key: t.Key, Value: t.Value, Effect: string(t.Effect)})
	}
	return out
}

// PatchNode implements ports.Cluster. Labels and annotations go in a JSON
// merge patch of metadata: map keys merge on the server, so concurrent
// writers of other keys (kubelet, other controllers) are never overwritten
// and no conflict can arise. Taints are a list that a merge patch replaces
// whole, so they are read, extended and written back with the
// resourceVersion read as a precondition, retried on conflict: a taint
// someone else added meanwhile is never lost.
func (c *Cluster) PatchNode(ctx context.Context, name string, labels, annotations map[string]string, taints []ports.Taint) error {
	nodes := c.client.CoreV1().Nodes()
	if len(labels) == 0 && len(annotations) == 0 && len(taints) == 0 {
		// Nothing to write, but the port's contract still holds: a
		// missing Node is an error.
		if _, err := nodes.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("patching node %s: %w", name, err)
		}
		return nil
	}
	if len(labels) > 0 || len(annotations) > 0 {
		meta := map[string]any{}
		if len(labels) > 0 {
			meta["labels"] = labels
		}
		if len(annotations) > 0 {
			meta["annotations"] = annotations
		}
		patch, err := json.Marshal(map[string]any{"metadata": meta})
		if err != nil {
			return fmt.Errorf("encoding the patch of node %s: %w", name, err)
		}
		if _, err := nodes.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
			return fmt.Errorf("labelling node %s: %w", name, err)
		}
	}
	if len(taints) == 0 {
		return nil
	}
	err := retry.RetryOnConflict(taintBackoff, func() error {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		merged, changed := addTaints(n.Spec.Taints, taints)
		if !changed {
			return nil
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": n.ResourceVersion},
			"spec":     map[string]any{"taints": merged},
		})
		if err != nil {
			return err
		}
		_, err = nodes.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		return err
	})
	if err != nil {
		return fmt.Errorf("tainting node %s: %w", name, err)
	}
	return nil
}

// taintBackoff spaces the read-modify-write attempts of PatchNode's
// taints. A conflict means another writer changed the Node between our
// read and our write, and each write of theirs can cost us at most one
// attempt: client-go's DefaultBackoff (4 attempts, no real jitter) lost
// to eight concurrent writers of one Node (the contract suite's), against
// the port's "resolves write conflicts itself". Twenty attempts, spread
// by full jitter, outlast any burst of writers a Node sees (about 6s of
// waits in all, 13s at most; no Cap: client-go's Cap would end the steps
// early); ctx still bounds the whole (a Get after it ended fails at once).
var taintBackoff = wait.Backoff{Duration: 10 * time.Millisecond, Factor: 1.3, Jitter: 1, Steps: 20}

// addTaints returns have plus the taints of want it lacks (by key and
// effect, as the API server identifies taints).
func addTaints(have []corev1.Taint, want []ports.Taint) ([]corev1.Taint, bool) {
	out := append([]corev1.Taint(nil), have...)
	changed := false
	for _, w := range want {
		found := false
		for _, h := range have {
			if h.Key == w.Key && string(h.Effect) == w.Effect {
				found = true
				break
			}
		}
		if !found {
			out = append(out, corev1.Taint{Key: w.Key, Value: w.Value, Effect: corev1.TaintEffect(w.Effect)})
			changed = true
		}
	}
	return out, changed
}

// DeleteNode implements ports.Cluster: a missing Node is success.
func (c *Cluster) DeleteNode(ctx context.Context, name string) error {
	err := c.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting node %s: %w", name, err)
	}
	return nil
}
