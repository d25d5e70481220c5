package app

import (
	"context"
	"sync"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// nodeCache is the node watcher's view of the cluster's Nodes.
type nodeCache struct {
	mu         sync.RWMutex
	byName     map[string]ports.Node
	byProvider map[string]string
}

func newNodeCache() *nodeCache {
	return &nodeCache{byName: map[string]ports.Node{}, byProvider: map[string]string{}}
}

func (c *nodeCache) apply(ev ports.NodeEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.byName[ev.Node.Name]; ok && old.ProviderID != "" {
		delete(c.byProvider, old.ProviderID)
	}
	if ev.Type == ports.NodeDeleted {
		delete(c.byName, ev.Node.Name)
		return
	}
	c.byName[ev.Node.Name] = ev.Node
	if ev.Node.ProviderID != "" {
		c.byProvider[ev.Node.ProviderID] = ev.Node.Name
	}
}

// forInstance returns the Node of an instance: the one carrying its
// providerID, else the one named like it.
func (c *nodeCache) forInstance(in domain.Instance) (ports.Node, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if name, ok := c.byProvider[in.ProviderID]; ok {
		return c.byName[name], true
	}
	n, ok := c.byName[in.Node()]
	return n, ok
}

// registered reports whether a Node exists for the instance (CA counts it as
// a registered node, which DecreaseTargetSize must never remove). Without a
// cluster, Running is the only evidence of registration.
func (a *App) registeredLocked(in domain.Instance) bool {
	if in.State == domain.StateRunning {
		return true
	}
	if a.cluster == nil {
		return false
	}
	_, ok := a.nodes.forInstance(in)
	return ok
}

// RunNodeWatcher keeps the node cache current until ctx ends, re-watching
// with backoff when the watch breaks. Without a cluster it returns at once.
func (a *App) RunNodeWatcher(ctx context.Context) error {
	if a.cluster == nil {
		return nil
	}
	backoff := time.Second
	for {
		start := time.Now()
		err := a.cluster.Watch(ctx, a.onNodeEvent)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > time.Minute {
			backoff = time.Second
		}
		// Entries are kept across re-watches: a stale Node errs on the side
		// of treating capacity as registered, never of removing it.
		a.log.Warn("node watch ended, restarting", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

func (a *App) onNodeEvent(ev ports.NodeEvent) {
	a.nodes.apply(ev)
	if ev.Type == ports.NodeDeleted || !ev.Node.Ready {
		return
	}
	a.Wake()
	// A Node named after one of our instances but carrying another
	// providerID never counts as joined (CA could not match it either):
	// say so, since the likely cause is a join script without --provider-id.
	a.mu.Lock()
	r, ok := a.insts[ev.Node.Name]
	a.mu.Unlock()
	if ok && r.inst.State == domain.StateJoined && ev.Node.ProviderID != r.inst.ProviderID {
		a.log.Warn("node registered with an unexpected providerID; it will not count as joined",
			"instance", r.inst.ID, "group", r.inst.Group, "node", ev.Node.Name,
			"node_provider_id", ev.Node.ProviderID, "want_provider_id", r.inst.ProviderID)
	}
}

// Node returns the watcher's view of a Node by name.
func (a *App) Node(name string) (ports.Node, bool) {
	a.nodes.mu.RLock()
	defer a.nodes.mu.RUnlock()
	n, ok := a.nodes.byName[name]
	return n, ok
}
