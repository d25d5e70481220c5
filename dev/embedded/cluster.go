package embedded

import (
	"context"
	"errors"

	lifecycle "github.com/nodesmith/nodesmith/services/lifecycle/service"
	"github.com/nodesmith/nodesmith/tools/simcluster"
)

// SimCluster adapts the simulated cluster to lifecycle's Cluster port: the
// embedded stack's (and the benchmarks') stand-in for the client-go adapter.
type SimCluster struct{ C *simcluster.Cluster }

var _ lifecycle.Cluster = SimCluster{}

// Watch implements lifecycle.Cluster.
func (s SimCluster) Watch(ctx context.Context, fn func(lifecycle.NodeEvent)) error {
	for ev := range s.C.Watch(ctx) {
		t := lifecycle.NodeUpdated
		switch ev.Type {
		case simcluster.Added:
			t = lifecycle.NodeAdded
		case simcluster.Deleted:
			t = lifecycle.NodeDeleted
		}
		fn(lifecycle.NodeEvent{Type: t, Node: toNode(ev.Node)})
	}
	return ctx.Err()
}

// PatchNode implements lifecycle.Cluster.
func (s SimCluster) PatchNode(_ context.Context, name string, labels, annotations map[string]string, taints []lifecycle.Taint) error {
	ts := make([]simcluster.Taint, len(taints))
	for i, t := range taints {
		ts[i] = simcluster.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect}
	}
	return s.C.Patch(name, labels, annotations, ts)
}

// DeleteNode implements lifecycle.Cluster.
func (s SimCluster) DeleteNode(_ context.Context, name string) error {
	if err := s.C.Delete(name); err != nil && !errors.Is(err, simcluster.ErrNotFound) {
		return err
	}
	return nil
}

func toNode(n simcluster.Node) lifecycle.Node {
	ts := make([]lifecycle.Taint, len(n.Taints))
	for i, t := range n.Taints {
		ts[i] = lifecycle.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect}
	}
	return lifecycle.Node{Name: n.Name, ProviderID: n.ProviderID, Ready: n.Ready, Labels: n.Labels, Annotations: n.Annotations, Taints: ts}
}
