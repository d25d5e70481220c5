package memory

import (
	"context"
	"maps"
	"slices"
	"sort"
	"sync"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

var _ ports.Cluster = (*Cluster)(nil)

// Cluster is an in-memory ports.Cluster: tests register nodes, flip their
// readiness and observe patches and deletions.
type Cluster struct {
	mu       sync.Mutex
	nodes    map[string]ports.Node
	watchers map[chan ports.NodeEvent]struct{}
	deleted  []string
	// PatchErr and DeleteErr, when set, fail the calls.
	PatchErr  error
	DeleteErr error
	// NoSyncedEvent makes Watch omit NodesSynced after the initial list
	// (as an adapter that cannot tell when it is complete).
	NoSyncedEvent bool
}

// NewCluster returns an empty cluster.
func NewCluster() *Cluster {
	return &Cluster{nodes: map[string]ports.Node{}, watchers: map[chan ports.NodeEvent]struct{}{}}
}

func clone(n ports.Node) ports.Node {
	n.Labels = maps.Clone(n.Labels)
	n.Annotations = maps.Clone(n.Annotations)
	n.Taints = slices.Clone(n.Taints)
	return n
}

func (c *Cluster) broadcastLocked(ev ports.NodeEvent) {
	for w := range c.watchers {
		w <- ev
	}
}

// Watch implements ports.Cluster.
func (c *Cluster) Watch(ctx context.Context, fn func(ports.NodeEvent)) error {
	ch := make(chan ports.NodeEvent, 1024)
	c.mu.Lock()
	names := slices.Sorted(maps.Keys(c.nodes))
	for _, n := range names {
		ch <- ports.NodeEvent{Type: ports.NodeAdded, Node: clone(c.nodes[n])}
	}
	if !c.NoSyncedEvent {
		ch <- ports.NodeEvent{Type: ports.NodesSynced}
	}
	c.watchers[ch] = struct{}{}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.watchers, ch)
		c.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-ch:
			fn(ev)
		}
	}
}

// Put adds or replaces a node.
func (c *Cluster) Put(n ports.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	typ := ports.NodeUpdated
	if _, ok := c.nodes[n.Name]; !ok {
		typ = ports.NodeAdded
	}
	c.nodes[n.Name] = clone(n)
	c.broadcastLocked(ports.NodeEvent{Type: typ, Node: clone(n)})
}

// Get returns a node.
func (c *Cluster) Get(name string) (ports.Node, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	return clone(n), ok
}

// Names lists the nodes.
func (c *Cluster) Names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := slices.Collect(maps.Keys(c.nodes))
	sort.Strings(names)
	return names
}

// Deleted lists the nodes deleted through DeleteNode.
func (c *Cluster) Deleted() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.deleted)
}

// PatchNode implements ports.Cluster.
func (c *Cluster) PatchNode(_ context.Context, name string, labels, annotations map[string]string, taints []ports.Taint) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.PatchErr != nil {
		return c.PatchErr
	}
	n, ok := c.nodes[name]
	if !ok {
		return ErrNodeNotFound
	}
	n = clone(n)
	changed := false
	merge := func(dst *map[string]string, src map[string]string) {
		for k, v := range src {
			if old, ok := (*dst)[k]; ok && old == v {
				continue
			}
			if *dst == nil {
				*dst = map[string]string{}
			}
			(*dst)[k] = v
			changed = true
		}
	}
	merge(&n.Labels, labels)
	merge(&n.Annotations, annotations)
	for _, t := range taints {
		if !slices.ContainsFunc(n.Taints, func(x ports.Taint) bool { return x.Key == t.Key && x.Effect == t.Effect }) {
			n.Taints = append(n.Taints, t)
			changed = true
		}
	}
	// As the API server, a patch that changes nothing is no change:
	// watchers see no event.
	if !changed {
		return nil
	}
	c.nodes[name] = n
	c.broadcastLocked(ports.NodeEvent{Type: ports.NodeUpdated, Node: clone(n)})
	return nil
}

// DeleteNode implements ports.Cluster.
func (c *Cluster) DeleteNode(_ context.Context, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.DeleteErr != nil {
		return c.DeleteErr
	}
	n, ok := c.nodes[name]
	if !ok {
		return nil
	}
	delete(c.nodes, name)
	c.deleted = append(c.deleted, name)
	c.broadcastLocked(ports.NodeEvent{Type: ports.NodeDeleted, Node: n})
	return nil
}

// SetErrors sets PatchErr and DeleteErr under the lock.
func (c *Cluster) SetErrors(patch, del error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.PatchErr, c.DeleteErr = patch, del
}

type notFound struct{}

func (notFound) Error() string { return "node not found" }

// ErrNodeNotFound is returned by PatchNode for a missing node.
var ErrNodeNotFound error = notFound{}
