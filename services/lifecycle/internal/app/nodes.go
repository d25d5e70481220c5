package app

import (
	"context"
	"sync"
	"time"

	"github.com/nodesmith/nodesmith/libs/backoff"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// nodes is the nodes component: the Kubernetes Nodes the watch sees
// (known), the node changes the dispatcher applies to instances, the
// adoption of Nodes lifecycle did not create (adopt.go), and the tagging
// of existing VMs for adoption (adopt_vms.go).
type nodes struct {
	*cache
	// nodesSeen is the node cache version the last full node check saw;
	// nodeRecheck forces a full check (a node change failed to apply).
	nodesSeen   uint64
	nodeRecheck bool
	// adoptReported remembers, per Node, the last reason it was not
	// adopted, so it is reported once rather than every pass.
	adoptReported map[string]string
	// tagWaiters are the AdoptVMs waiting for the cloud adapter's answer,
	// by request id (adopt_vms.go).
	tagWaiters map[string]chan TagResult
}

func newNodes(c *cache) *nodes {
	return &nodes{cache: c, adoptReported: map[string]string{}}
}

// nodeCache is the node watcher's view of the cluster's Nodes.
type nodeCache struct {
	mu         sync.RWMutex
	byName     map[string]ports.Node
	byProvider map[string]string
	// gen numbers the watches; seen is the watch that last delivered each
	// Node, so the Nodes deleted while no watch ran are dropped once a new
	// watch has delivered its initial list.
	gen  uint64
	seen map[string]uint64
	// synced: the current watch delivered its initial list, so a Node
	// missing from the cache is really gone.
	synced bool
	// version counts the changes that matter to the dispatcher (see apply).
	version uint64
	// spotNotices are, per group, the times of the spot notices whose
	// replacement is not Running yet (spot.go), oldest first.
	spotNotices map[string][]time.Time
}

func newNodeCache() *nodeCache {
	return &nodeCache{byName: map[string]ports.Node{}, byProvider: map[string]string{}, seen: map[string]uint64{}}
}

// beginWatch starts a new watch: until it is synced, absence proves nothing.
func (c *nodeCache) beginWatch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.synced = false
}

// unsync forgets that the cache was complete (a new leadership term: the
// watch restarts).
func (c *nodeCache) unsync() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.synced = false
}

func (c *nodeCache) isSynced() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.synced
}

// apply records ev and reports whether it matters to the dispatcher: the
// cache became complete, a Node appeared or went, or its readiness or
// providerID changed (kubelets' routine status updates do not).
func (c *nodeCache) apply(ev ports.NodeEvent) (relevant bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer func() {
		if relevant {
			c.version++
		}
	}()
	switch ev.Type {
	case ports.NodesSynced:
		c.syncLocked()
		return true
	case ports.NodeUpdated, ports.NodeDeleted:
		if !c.synced {
			// Changes come after the initial list (the port's contract).
			c.syncLocked()
			relevant = true
		}
	}
	old, existed := c.byName[ev.Node.Name]
	if existed && old.ProviderID != "" {
		delete(c.byProvider, old.ProviderID)
	}
	if ev.Type == ports.NodeDeleted {
		delete(c.byName, ev.Node.Name)
		delete(c.seen, ev.Node.Name)
		return relevant || existed
	}
	c.byName[ev.Node.Name] = ev.Node
	c.seen[ev.Node.Name] = c.gen
	if ev.Node.ProviderID != "" {
		c.byProvider[ev.Node.ProviderID] = ev.Node.Name
	}
	return relevant || !existed || old.Ready != ev.Node.Ready || old.ProviderID != ev.Node.ProviderID ||
		hasSpotTaint(old) != hasSpotTaint(ev.Node)
}

// syncLocked marks the cache complete and drops the Nodes the current
// watch did not deliver (deleted while no watch ran).
func (c *nodeCache) syncLocked() {
	for name, gen := range c.seen {
		if gen == c.gen {
			continue
		}
		if n, ok := c.byName[name]; ok && n.ProviderID != "" && c.byProvider[n.ProviderID] == name {
			delete(c.byProvider, n.ProviderID)
		}
		delete(c.byName, name)
		delete(c.seen, name)
	}
	c.synced = true
}

// changes returns the version of the cache's relevant content.
func (c *nodeCache) changes() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.version
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

// byProviderID returns the Node carrying providerID (never a name match:
// only that proves the Node is this VM's).
func (c *nodeCache) byProviderID(providerID string) (ports.Node, bool) {
	if providerID == "" {
		return ports.Node{}, false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	name, ok := c.byProvider[providerID]
	if !ok {
		return ports.Node{}, false
	}
	return c.byName[name], true
}

// all returns a snapshot of the cached Nodes.
func (c *nodeCache) all() []ports.Node {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]ports.Node, 0, len(c.byName))
	for _, n := range c.byName {
		out = append(out, n)
	}
	return out
}

// registered reports whether a Node exists for the instance (CA counts it as
// a registered node, which DecreaseTargetSize must never remove). Without a
// cluster, Running is the only evidence of registration.
func (nd *nodes) registeredLocked(in domain.Instance) bool {
	if in.State == domain.StateRunning {
		return true
	}
	if nd.cluster == nil {
		return false
	}
	_, ok := nd.known.forInstance(in)
	return ok
}

// RunNodeWatcher keeps the node cache current until ctx ends, re-watching
// with backoff when the watch breaks. Without a cluster it returns at once.
func (nd *nodes) RunNodeWatcher(ctx context.Context) error {
	if nd.cluster == nil {
		return nil
	}
	b := backoff.Policy{Initial: time.Second, Max: 30 * time.Second, Jitter: backoff.JitterNone}.New()
	for {
		start := time.Now()
		// Entries are kept across re-watches until the new watch is synced:
		// a stale Node errs on the side of treating capacity as registered,
		// never of removing it.
		nd.known.beginWatch()
		err := nd.cluster.Watch(ctx, nd.onNodeEvent)
		if done(ctx) {
			return nil
		}
		if time.Since(start) > time.Minute {
			b.Reset()
		}
		d := b.Next()
		nd.log.Warn("node watch ended, restarting", "err", err, "in", d)
		if backoff.Wait(ctx, d) != nil {
			return nil //nolint:nilerr // the wait ended because we are stopping
		}
	}
}

func (nd *nodes) onNodeEvent(ev ports.NodeEvent) {
	if !nd.known.apply(ev) {
		return
	}
	// A Joined instance may now be Ready, a Running one may have lost its
	// Node or got it back, a new Node may be adoptable.
	nd.Wake()
	if ev.Type == ports.NodesSynced {
		nd.log.Info("node watch synced")
		return
	}
	if ev.Type == ports.NodeDeleted || !ev.Node.Ready {
		return
	}
	// A Node named after one of our instances but carrying another
	// providerID never counts as joined (CA could not match it either):
	// say so, since the likely cause is a join script without the kubelet's
	// --provider-id.
	nd.mu.Lock()
	r, ok := nd.insts[ev.Node.Name]
	nd.mu.Unlock()
	if ok && r.Instance.State == domain.StateJoined && ev.Node.ProviderID != r.Instance.ProviderID {
		nd.log.Warn("node registered with an unexpected providerID; it will not count as joined",
			"instance", r.Instance.ID, "group", r.Instance.Group, "node", ev.Node.Name,
			"node_provider_id", ev.Node.ProviderID, "want_provider_id", r.Instance.ProviderID)
	}
}

// nodeChangesLocked returns the node events the Running instances need:
// NodeGone for one whose Node is missing (only once the watch is synced),
// NodeBack for one waiting for its Node that has it again. It also returns
// the Nodes that still carry the providerID of a Deleted instance: deleting
// the Node is the closing transition's effect, lost when the leader stopped
// between writing the record and acting on it; the next check of every
// instance (a new leader's synced watch starts one) catches up.
func (nd *nodes) nodeChangesLocked() (events map[string]domain.Event, stale []string) {
	if nd.cluster == nil {
		return nil, nil
	}
	synced := nd.known.isSynced()
	// A Running instance at rest can only need a change when the Nodes
	// changed: check every instance then, else only those with work (a
	// Running one waiting for its Node again has a deadline).
	ids := nd.idx.active
	if v := nd.known.changes(); v != nd.nodesSeen || nd.nodeRecheck {
		nd.nodesSeen, nd.nodeRecheck = v, false
		ids = nil
	}
	out := map[string]domain.Event{}
	check := func(id string, in domain.Instance) {
		if in.State == domain.StateDeleted {
			if n, ok := nd.known.byProviderID(in.ProviderID); ok {
				stale = append(stale, n.Name)
			}
			return
		}
		if ev, ok := nd.spotNoticeLocked(in); ok {
			out[id] = ev
			return
		}
		if in.State != domain.StateRunning {
			return
		}
		_, present := nd.known.forInstance(in)
		switch {
		case present && in.NodeLost():
			out[id] = domain.NodeBack{NodeName: in.Node()}
		case !present && synced && !in.NodeLost():
			out[id] = domain.NodeGone{NodeName: in.Node()}
		}
	}
	if ids == nil {
		for id, r := range nd.insts {
			check(id, r.Instance)
		}
	} else {
		for id := range ids {
			check(id, nd.insts[id].Instance)
		}
	}
	return out, stale
}

// deleteStaleNodes deletes the Nodes of Deleted instances (see
// nodeChangesLocked); a failure is retried at the next full check.
func (nd *nodes) deleteStaleNodes(ctx context.Context, names []string) {
	for _, name := range names {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := nd.cluster.DeleteNode(dctx, name)
		cancel()
		if err != nil {
			nd.log.Warn("deleting the Node of a deleted instance", "node", name, "err", err)
			nd.mu.Lock()
			nd.nodeRecheck = true
			nd.mu.Unlock()
			continue
		}
		nd.log.Info("deleted the Node of a deleted instance (its deletion had not happened)", "node", name)
	}
}

// Node returns the watcher's view of a Node by name.
func (nd *nodes) Node(name string) (ports.Node, bool) {
	nd.known.mu.RLock()
	defer nd.known.mu.RUnlock()
	n, ok := nd.known.byName[name]
	return n, ok
}

// done reports whether ctx has ended (its error is the caller's normal stop,
// not a failure to report).
func done(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// NodesSynced reports whether the node watch has delivered its initial list
// in this leadership term (the absence of a Node is trusted only then).
func (nd *nodes) NodesSynced() bool { return nd.known.isSynced() }
