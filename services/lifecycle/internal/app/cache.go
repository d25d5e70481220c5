package app

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/libs/providerid"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// cache is the single-writer cache: every group and instance record in
// memory while leader, the indexes kept over them, and their
// compare-and-set writes (write.go). It also carries the ports every
// component shares. Its methods, and every component's methods named
// ...Locked, run with mu held.
type cache struct {
	opts  Options
	store ports.Store
	// feed is the store's change feed, nil if it has none (standby.go).
	feed    ports.InstanceFeed
	cmds    ports.Commands
	cluster ports.Cluster
	clock   ports.Clock
	log     *slog.Logger
	obs     Observer
	notify  ports.Notifier
	random  func(int) string
	jitter  func() float64
	tracer  ports.Tracer
	// created is called (mu held) after a new instance record is written.
	created func(ctx context.Context)

	// loadMu serialises loads: the leader's and the standby's (standby.go).
	loadMu sync.Mutex
	mu     sync.Mutex
	loaded bool
	// warm: while not loaded, insts (and its indexes) hold the store's
	// instance records as of warmPos, read at warmAt (standby.go).
	warm    bool
	warmPos ports.FeedPos
	warmAt  time.Time
	// groups is changed only by setGroupLocked and dropGroupLocked (and
	// resetGroupsLocked at load), which keep appliedIn.
	groups map[string]*groupRec
	// appliedIn indexes the groups' applied requests: request id -> the
	// ids of the groups recording it (expired records included until the
	// group is written again), so a repeat is found without a scan.
	appliedIn map[string]map[string]struct{}
	insts     map[string]*instRec
	// byProvider indexes instances by their recorded providerID
	// (placeholder or real); an instance whose providerID is real is also
	// found by its placeholder, parsed (instanceByProviderIDLocked): a
	// second key per instance cost ~90 bytes each (issue 20).
	byProvider map[string]string
	// idx indexes insts for the dispatcher (kept by setInstLocked and
	// dropInstLocked), so a pass costs what has work, not every record.
	idx instIndex
	// published remembers the attempt whose command was published per
	// instance, so the outbox publishes each (instance, attempt) once per
	// leadership term (kept here so that it forgets what has no command).
	published map[string]uint32
	wake      chan struct{}
	// known is the node watcher's view of the cluster's Nodes (nodes.go;
	// it has its own lock).
	known *nodeCache
}

type groupRec struct {
	g   domain.NodeGroup
	rev uint64
}

// instRec is a cached instance at its revision. It is the store's type:
// a load caches the records the store decoded, not copies of them (issue
// 20: three copies of every record at once set the load's peak).
type instRec = ports.VersionedInstance

// resetGroupsLocked empties the group cache, for size groups to come.
func (c *cache) resetGroupsLocked(size int) {
	c.groups = make(map[string]*groupRec, size)
	c.appliedIn = map[string]map[string]struct{}{}
}

// setGroupLocked caches g at rev and returns its record. A cached record
// is updated in place, so a caller holding it sees the write.
func (c *cache) setGroupLocked(g domain.NodeGroup, rev uint64) *groupRec {
	rec, ok := c.groups[g.ID]
	if !ok {
		rec = &groupRec{}
		c.groups[g.ID] = rec
	}
	old := rec.g.Applied
	rec.g, rec.rev = g, rev
	c.reindexAppliedLocked(g.ID, old, g.Applied)
	return rec
}

// dropGroupLocked forgets a group (deleted).
func (c *cache) dropGroupLocked(id string) {
	if rec, ok := c.groups[id]; ok {
		c.reindexAppliedLocked(id, rec.g.Applied, nil)
		delete(c.groups, id)
	}
}

func (c *cache) setInstLocked(in domain.Instance, rev uint64) {
	c.putInstLocked(&instRec{Instance: in, Revision: rev})
}

// putInstLocked caches r itself (setInstLocked caches a copy).
func (c *cache) putInstLocked(r *instRec) {
	in := &r.Instance
	if old, ok := c.insts[in.ID]; ok {
		if old.Instance.ProviderID != in.ProviderID {
			delete(c.byProvider, old.Instance.ProviderID)
		}
		c.idx.remove(old.Instance)
	}
	c.insts[in.ID] = r
	c.byProvider[in.ProviderID] = in.ID
	c.idx.add(*in)
	if _, ok := domain.PendingCommand(*in); !ok {
		// Nothing to publish: forget what was published for it.
		delete(c.published, in.ID)
	}
}

func (c *cache) dropInstLocked(id string) {
	if r, ok := c.insts[id]; ok {
		delete(c.byProvider, r.Instance.ProviderID)
		c.idx.remove(r.Instance)
	}
	delete(c.insts, id)
	delete(c.published, id)
}

// env returns the transition environment of an instance.
func (c *cache) envLocked(group string) domain.Env {
	env := domain.Env{
		Now:       c.clock.Now(),
		Policy:    c.opts.Policy,
		NoCluster: c.cluster == nil,
		Jitter:    c.jitter(),
	}
	if g, ok := c.groups[group]; ok {
		env.Group = g.g
	}
	return env
}

// Wake makes the dispatcher run soon.
func (c *cache) Wake() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *cache) groupLocked(id string) (*groupRec, error) {
	g, ok := c.groups[id]
	if !ok {
		return nil, domain.Errorf(contract.CodeNotFound, "node group %q not found", id)
	}
	return g, nil
}

func (c *cache) liveLocked(group string) []domain.Instance {
	var out []domain.Instance
	for id := range c.idx.byGroup[group] {
		if r := c.insts[id]; r.Instance.Live() {
			out = append(out, r.Instance)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// activeCountLocked counts a group's instances that are not Deleted.
func (c *cache) activeCountLocked(group string) int {
	n := 0
	for _, r := range c.insts {
		if r.Instance.Group == group && r.Instance.State != domain.StateDeleted {
			n++
		}
	}
	return n
}

// sortedGroupIDs returns the cached group ids in order.
func (c *cache) sortedGroupIDsLocked() []string {
	ids := make([]string, 0, len(c.groups))
	for id := range c.groups {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// findAppliedLocked returns the group recording request id, unexpired.
func (c *cache) findAppliedLocked(id string) (*groupRec, domain.AppliedRequest, bool) {
	now := c.clock.Now()
	for gid := range c.appliedIn[id] {
		g := c.groups[gid]
		if rec, ok := domain.FindApplied(g.g.Applied, id, now, c.opts.RequestTTL); ok {
			return g, rec, true
		}
	}
	return nil, domain.AppliedRequest{}, false
}

// reindexAppliedLocked replaces the applied requests old of a group by
// cur in c.appliedIn. The entries of the ids the group keeps are reused:
// a write usually adds one record and drops one.
func (c *cache) reindexAppliedLocked(group string, old, cur []domain.AppliedRequest) {
	for _, r := range old {
		delete(c.appliedIn[r.ID], group)
	}
	for _, r := range cur {
		in := c.appliedIn[r.ID]
		if in == nil {
			in = map[string]struct{}{}
			c.appliedIn[r.ID] = in
		}
		in[group] = struct{}{}
	}
	for _, r := range old {
		if len(c.appliedIn[r.ID]) == 0 {
			delete(c.appliedIn, r.ID)
		}
	}
}

// instanceByProviderIDLocked returns the id of the cached instance whose
// providerID is providerID: the one it records (placeholder or real), or
// its placeholder.
func (c *cache) instanceByProviderIDLocked(providerID string) (string, bool) {
	if id, ok := c.byProvider[providerID]; ok {
		return id, true
	}
	if group, id, ok := providerid.ParsePlaceholder(providerID); ok {
		if r, ok := c.insts[id]; ok && r.Instance.Group == group {
			return id, true
		}
	}
	return "", false
}

// finder looks up cached instances for domain.ResolveNode (mu held).
type finder cache

func (f *finder) ByProviderID(providerID string) (domain.Instance, bool) {
	if id, ok := (*cache)(f).instanceByProviderIDLocked(providerID); ok {
		if r, ok := f.insts[id]; ok {
			return r.Instance, true
		}
	}
	return domain.Instance{}, false
}

func (f *finder) ByID(id string) (domain.Instance, bool) {
	if r, ok := f.insts[id]; ok {
		return r.Instance, true
	}
	return domain.Instance{}, false
}

func (f *finder) ByNodeName(name string) (domain.Instance, bool) {
	for _, r := range f.insts {
		if r.Instance.NodeName == name {
			return r.Instance, true
		}
	}
	return domain.Instance{}, false
}
