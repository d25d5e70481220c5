// Package app holds the gateway's use cases: the in-memory read model that
// answers every read (Cluster Autoscaler calls many of them per loop under
// one lock, so none may touch the network), and the operations that go to
// lifecycle and wait until their result is visible here.
package app

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/nodesmith/nodesmith/libs/providerid"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// Bucket names one of the two KV buckets the read model mirrors.
type Bucket int

// The mirrored buckets.
const (
	BucketGroups Bucket = iota
	BucketInstances
	BucketCatalog
	// BucketOfferings holds the offerings cloud adapters marked
	// unavailable (readmodel_offerings.go).
	BucketOfferings
	numBuckets
)

func (b Bucket) String() string {
	switch b {
	case BucketGroups:
		return "groups"
	case BucketInstances:
		return "instances"
	case BucketCatalog:
		return "catalog"
	case BucketOfferings:
		return "offerings"
	}
	return fmt.Sprintf("bucket(%d)", int(b))
}

// GroupView is a node group as the read model holds it. Record is shared:
// callers must not modify it.
type GroupView struct {
	Record   *domain.NodeGroup
	Revision uint64
	// Debug is the one-line description CA logs for the group.
	Debug string
}

// InstanceView is an instance as the read model holds it. Record is
// shared: callers must not modify it.
type InstanceView struct {
	Key      string
	Record   *domain.Instance
	Revision uint64
	// ReportedID is the id CA sees: the providerID lifecycle recorded, or
	// the placeholder when a record lacks one.
	ReportedID string
}

// Group is the id of the instance's group.
func (v InstanceView) Group() string { return v.Record.Group }

// State is the instance's state in domain terms.
func (v InstanceView) State() domain.InstanceState { return v.Record.State }

type groupEntry struct {
	view GroupView
}

type instanceEntry struct {
	view InstanceView
	// group, nodeName and state are copied out of the record so the hot
	// lookups touch one object less (the record is a cache miss of its
	// own at 100k instances).
	group    string
	nodeName string
	state    domain.InstanceState
}

// live reports whether the entry may back a Node; lookups prefer live
// entries over DELETED history.
func (e *instanceEntry) live() bool { return e.state.Live() }

// multiIndex maps a string to the entries carrying it. Provider ids and
// instance ids are unique in practice, node names are not (a VM's private
// IP, and so its node name, is reused after a DELETED record's VM is
// gone), so every index tolerates duplicates and lookups prefer a live
// entry, then the newest.
type multiIndex map[string][]*instanceEntry

func (ix multiIndex) add(k string, e *instanceEntry) {
	if k != "" {
		ix[k] = append(ix[k], e)
	}
}

func (ix multiIndex) remove(k string, e *instanceEntry) {
	if k == "" {
		return
	}
	list := ix[k]
	for i, x := range list {
		if x == e {
			list = slices.Delete(list, i, i+1)
			break
		}
	}
	if len(list) == 0 {
		delete(ix, k)
		return
	}
	ix[k] = list
}

// get returns the preferred entry for k; with liveOnly it ignores DELETED
// records.
func (ix multiIndex) get(k string, liveOnly bool) *instanceEntry {
	var best *instanceEntry
	for _, e := range ix[k] {
		switch {
		case liveOnly && !e.live():
		case best == nil,
			e.live() && !best.live(),
			e.live() == best.live() && e.view.Revision > best.view.Revision:
			best = e
		}
	}
	return best
}

// ReadModel mirrors the groups and instances buckets in memory with the
// indexes CA's calls need. It is safe for concurrent use: readers share an
// RWMutex and never wait for the network; the KV watcher is the only writer.
type ReadModel struct {
	mu        sync.RWMutex
	groups    map[string]*groupEntry
	instances map[string]*instanceEntry            // by KV key
	byGroup   map[string]map[string]*instanceEntry // group id -> KV key -> entry
	// stateCounts counts each group's instances per state, kept with
	// byGroup so counts cost nothing per change or read.
	stateCounts  map[string]map[domain.InstanceState]int
	byProviderID multiIndex
	byNodeName   multiIndex
	byID         multiIndex
	// catalog holds the catalog bucket by KV key (readmodel_catalog.go).
	catalog map[string]CatalogView
	// offerings holds the offerings bucket's marks by KV key, expired
	// ones included (readers compare with their clock).
	offerings      map[string]OfferingMarkView
	offeringsByRef map[domain.OfferingRef]map[string]struct{}
	// orphanHold is the reserved key of the groups bucket
	// (readmodel_orphans.go); nil when none is stored.
	orphanHold *OrphanHold
	rev        [numBuckets]uint64
	synced     [numBuckets]bool
	// changed is closed (and cleared) whenever a revision advances or a
	// bucket becomes synced; it exists only while someone waits, so the
	// initial load of many thousand records allocates no channels.
	changed chan struct{}
	// watches are the subscribers to changes (readmodel_watch.go);
	// reloading marks a bucket being loaded again after a reset, whose
	// changes are not published one by one.
	watches   map[*Watch]struct{}
	reloading [numBuckets]bool
}

// NewReadModel returns an empty, unsynced read model.
func NewReadModel() *ReadModel {
	return &ReadModel{
		groups:         map[string]*groupEntry{},
		instances:      map[string]*instanceEntry{},
		byGroup:        map[string]map[string]*instanceEntry{},
		stateCounts:    map[string]map[domain.InstanceState]int{},
		byProviderID:   multiIndex{},
		byNodeName:     multiIndex{},
		byID:           multiIndex{},
		catalog:        map[string]CatalogView{},
		offerings:      map[string]OfferingMarkView{},
		offeringsByRef: map[domain.OfferingRef]map[string]struct{}{},
	}
}

// advance records that bucket b reached rev and wakes waiters. Called with
// mu held for writing.
func (m *ReadModel) advance(b Bucket, rev uint64) {
	if rev > m.rev[b] {
		m.rev[b] = rev
		m.notify()
	}
}

func (m *ReadModel) notify() {
	if m.changed != nil {
		close(m.changed)
		m.changed = nil
	}
}

// PutGroup applies a group record written at rev under key.
func (m *ReadModel) PutGroup(key string, rev uint64, rec *domain.NodeGroup) {
	if rec.ID == "" {
		rec.ID = key
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.groups[key]
	if old != nil && old.view.Revision > rev {
		return // a resync replayed an older value
	}
	m.groups[key] = &groupEntry{view: GroupView{Record: rec, Revision: rev, Debug: groupDebug(key, rec)}}
	m.advance(BucketGroups, rev)
	if m.watched(BucketGroups) && (old == nil || old.view.Revision < rev) {
		m.publishGroup(key)
	}
}

// DeleteGroup applies a delete or purge of key at rev.
func (m *ReadModel) DeleteGroup(key string, rev uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, existed := m.groups[key]
	delete(m.groups, key)
	m.advance(BucketGroups, rev)
	if existed && m.watched(BucketGroups) {
		m.publish(WatchEvent{Kind: WatchGroupDeleted, GroupID: key})
	}
}

// PutInstance applies an instance record written at rev under key.
func (m *ReadModel) PutInstance(key string, rev uint64, rec *domain.Instance) {
	group, id := rec.Group, rec.ID
	if group == "" || id == "" {
		// Records always carry both; fall back to the key for robustness.
		kg, kid, _ := strings.Cut(key, ".")
		if group == "" {
			group = kg
		}
		if id == "" {
			id = kid
		}
		rec.Group, rec.ID = group, id
	}
	reported := rec.ProviderID
	if reported == "" {
		reported = providerid.Placeholder(group, id)
	}
	e := &instanceEntry{
		view:     InstanceView{Key: key, Record: rec, Revision: rev, ReportedID: reported},
		group:    group,
		nodeName: rec.NodeName,
		state:    rec.State,
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.instances[key]
	if old != nil {
		if old.view.Revision > rev {
			return
		}
		m.unindex(old)
	}
	m.instances[key] = e
	byKey := m.byGroup[group]
	if byKey == nil {
		byKey = map[string]*instanceEntry{}
		m.byGroup[group] = byKey
	}
	byKey[key] = e
	m.count(group, e.view.State(), 1)
	m.byProviderID.add(reported, e)
	m.byNodeName.add(e.nodeName, e)
	m.byID.add(id, e)
	m.advance(BucketInstances, rev)
	if m.watched(BucketInstances) && (old == nil || old.view.Revision < rev) {
		m.publishInstance(old, e)
	}
}

// DeleteInstance applies a delete or purge of key at rev.
func (m *ReadModel) DeleteInstance(key string, rev uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.instances[key]
	if old != nil {
		m.unindex(old)
	}
	m.advance(BucketInstances, rev)
	if old != nil && m.watched(BucketInstances) {
		m.publishGroup(old.group)
	}
}

// unindex removes e from every map. Called with mu held for writing.
func (m *ReadModel) unindex(e *instanceEntry) {
	delete(m.instances, e.view.Key)
	if byKey := m.byGroup[e.group]; byKey != nil {
		if byKey[e.view.Key] == e {
			m.count(e.group, e.view.State(), -1)
		}
		delete(byKey, e.view.Key)
		if len(byKey) == 0 {
			delete(m.byGroup, e.group)
		}
	}
	m.byProviderID.remove(e.view.ReportedID, e)
	m.byNodeName.remove(e.nodeName, e)
	m.byID.remove(e.view.Record.ID, e)
}

// count adds delta to group's count of state. Called with mu held for
// writing.
func (m *ReadModel) count(group string, state domain.InstanceState, delta int) {
	c := m.stateCounts[group]
	if c == nil {
		c = map[domain.InstanceState]int{}
		m.stateCounts[group] = c
	}
	if c[state] += delta; c[state] <= 0 {
		delete(c, state)
		if len(c) == 0 {
			delete(m.stateCounts, group)
		}
	}
}

// groupCountsLocked returns a copy of the group's instance counts per
// state. Called with mu held.
func (m *ReadModel) groupCountsLocked(group string) map[domain.InstanceState]int {
	counts := maps.Clone(m.stateCounts[group])
	if counts == nil {
		counts = map[domain.InstanceState]int{}
	}
	return counts
}

// Skip advances b's revision past a value that could not be applied (an
// undecodable record), so operations waiting for it do not hang.
func (m *ReadModel) Skip(b Bucket, rev uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.advance(b, rev)
}

// MarkSynced records that b's initial values are loaded. seen holds the
// keys the watch delivered before its end-of-initial-values marker; any
// other key is dropped, which makes a re-established watch converge even if
// deletes were missed while it was down. A nil seen prunes nothing.
func (m *ReadModel) MarkSynced(b Bucket, seen map[string]struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pruned := false
	switch {
	case seen == nil:
	case b == BucketGroups:
		for k := range m.groups {
			if _, ok := seen[k]; !ok {
				delete(m.groups, k)
				pruned = true
			}
		}
	case b == BucketInstances:
		for k, e := range m.instances {
			if _, ok := seen[k]; !ok {
				m.unindex(e)
				pruned = true
			}
		}
	case b == BucketCatalog:
		for k := range m.catalog {
			if _, ok := seen[k]; !ok {
				delete(m.catalog, k)
			}
		}
	case b == BucketOfferings:
		for k, v := range m.offerings {
			if _, ok := seen[k]; !ok {
				m.unindexOffering(v)
			}
		}
	}
	if !m.synced[b] {
		m.synced[b] = true
		m.notify()
	}
	if pruned || m.reloading[b] {
		// Deletes missed while the watch was down, or a whole bucket
		// loaded again: the watches start over from a snapshot.
		m.reloading[b] = false
		m.resyncAll()
	}
}

// Synced reports whether both buckets' initial values are loaded.
func (m *ReadModel) Synced() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.synced[BucketGroups] && m.synced[BucketInstances]
}

// Revisions returns the last applied revision of each bucket.
func (m *ReadModel) Revisions() (groups, instances uint64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.rev[BucketGroups], m.rev[BucketInstances]
}

// WaitFor blocks until the model is synced and has applied at least the
// given revisions (zero: no constraint for that bucket), or ctx ends.
func (m *ReadModel) WaitFor(ctx context.Context, groups, instances uint64) error {
	err := m.waitUntil(ctx, func() bool {
		return m.synced[BucketGroups] && m.synced[BucketInstances] &&
			m.rev[BucketGroups] >= groups && m.rev[BucketInstances] >= instances
	})
	if err != nil {
		return fmt.Errorf("waiting for groups revision %d and instances revision %d: %w", groups, instances, err)
	}
	return nil
}

// waitUntil blocks until reached (called under m.mu) holds, or ctx ends.
func (m *ReadModel) waitUntil(ctx context.Context, reached func() bool) error {
	for {
		m.mu.Lock()
		if reached() {
			m.mu.Unlock()
			return nil
		}
		if m.changed == nil {
			m.changed = make(chan struct{})
		}
		ch := m.changed
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Group returns the group with id.
func (m *ReadModel) Group(id string) (GroupView, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	g := m.groups[id]
	if g == nil {
		return GroupView{}, false
	}
	return g.view, true
}

// Groups returns every group, sorted by id.
func (m *ReadModel) Groups() []GroupView {
	m.mu.RLock()
	out := make([]GroupView, 0, len(m.groups))
	for _, g := range m.groups {
		out = append(out, g.view)
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b GroupView) int { return strings.Compare(a.Record.ID, b.Record.ID) })
	return out
}

// GroupForNode resolves a node as CA names it to its group: by providerID
// (real, placeholder, or a fake node's, which is our reported id), then by
// the placeholder's embedded instance id (a VM may have received its cloud
// id after CA listed the placeholder), then by node name (or instance id
// used as node name). Only live instances resolve: a DELETED record's VM is
// gone, so a Node still carrying its providerID (or name) is not ours any
// more and CA must see it as unmanaged. It does not allocate.
func (m *ReadModel) GroupForNode(providerID, name string) (GroupView, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e := m.resolveLocked(providerID, name)
	if e == nil {
		return GroupView{}, false
	}
	g := m.groups[e.group]
	if g == nil {
		return GroupView{}, false
	}
	return g.view, true
}

// InstanceForNode resolves a node like GroupForNode and returns its instance.
func (m *ReadModel) InstanceForNode(providerID, name string) (InstanceView, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if e := m.resolveLocked(providerID, name); e != nil {
		return e.view, true
	}
	return InstanceView{}, false
}

func (m *ReadModel) resolveLocked(providerID, name string) *instanceEntry {
	if providerID != "" {
		if e := m.byProviderID.get(providerID, true); e != nil {
			return e
		}
		if group, id, ok := providerid.ParsePlaceholder(providerID); ok {
			for _, e := range m.byID[id] {
				if e.group == group && e.live() {
					return e
				}
			}
		}
	}
	if name != "" {
		// A DELETED record's node name may even belong to an unrelated
		// node by now (private IPs are reused).
		if e := m.byNodeName.get(name, true); e != nil {
			return e
		}
		// A node named after the instance id (as lifecycle resolves too).
		if e := m.byID.get(name, true); e != nil {
			return e
		}
	}
	return nil
}

// GroupInstances appends the instances of group to buf and returns it.
func (m *ReadModel) GroupInstances(group string, buf []InstanceView) []InstanceView {
	m.mu.RLock()
	defer m.mu.RUnlock()
	byKey := m.byGroup[group]
	buf = slices.Grow(buf, len(byKey))
	for _, e := range byKey {
		buf = append(buf, e.view)
	}
	return buf
}

// GroupCounts counts the group's instances per state, and those whose
// creation failed.
func (m *ReadModel) GroupCounts(group string) (counts map[domain.InstanceState]int, creationFailed int) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, e := range m.byGroup[group] {
		if e.view.Record.CreationFailed {
			creationFailed++
		}
	}
	return m.groupCountsLocked(group), creationFailed
}

// Counts counts all instances per state.
func (m *ReadModel) Counts() map[domain.InstanceState]int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	counts := map[domain.InstanceState]int{}
	for _, e := range m.instances {
		counts[e.view.State()]++
	}
	return counts
}

// Instance returns the instance with id (the preferred one should ids ever
// collide across groups).
func (m *ReadModel) Instance(id string) (InstanceView, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if e := m.byID.get(id, false); e != nil {
		return e.view, true
	}
	return InstanceView{}, false
}

// Instances returns the instances keep accepts, in no particular order.
func (m *ReadModel) Instances(keep func(InstanceView) bool) []InstanceView {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []InstanceView
	for _, e := range m.instances {
		if keep == nil || keep(e.view) {
			out = append(out, e.view)
		}
	}
	return out
}

// Stats are sizes and revisions for metrics and the status endpoint.
type Stats struct {
	Groups, Instances             int
	GroupsRevision, InstancesRev  uint64
	GroupsSynced, InstancesSynced bool
}

// Stats returns the current sizes and revisions.
func (m *ReadModel) Stats() Stats {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return Stats{
		Groups: len(m.groups), Instances: len(m.instances),
		GroupsRevision: m.rev[BucketGroups], InstancesRev: m.rev[BucketInstances],
		GroupsSynced: m.synced[BucketGroups], InstancesSynced: m.synced[BucketInstances],
	}
}

// groupDebug is the description CA logs for a group: enough to tell
// groups apart in CA's logs without looking anything up.
func groupDebug(key string, g *domain.NodeGroup) string {
	id := g.ID
	if id == "" {
		id = key
	}
	var b strings.Builder
	fmt.Fprintf(&b, "nodesmith group %s (min %d, max %d, target %d", id, g.MinSize, g.MaxSize, g.TargetSize)
	if t := g.InstanceTemplate; t != nil {
		for _, kv := range [][2]string{{"provider", t.Provider}, {"region", t.Region}, {"zone", t.Zone}, {"type", t.InstanceType}, {"template", t.Name}} {
			if kv[1] != "" {
				fmt.Fprintf(&b, ", %s %s", kv[0], kv[1])
			}
		}
	}
	b.WriteString(")")
	return b.String()
}

// publishInstance publishes to the watches (readmodel_watch.go) what
// changed from old (nil: none) to e: the transitions added to its
// history, then its group's counts if its state changed. Called with mu
// held for writing.
func (m *ReadModel) publishInstance(old, e *instanceEntry) {
	var before []domain.Transition
	if old != nil {
		before = old.view.Record.History
	}
	for _, t := range addedTransitions(before, e.view.Record.History) {
		m.publish(WatchEvent{Kind: WatchTransition, GroupID: e.group, Transition: TransitionView{
			Instance: e.view.Record.ID, Group: e.group, Transition: t,
		}})
	}
	if old == nil || old.view.State() != e.view.State() {
		m.publishGroup(e.group)
	}
}

// addedTransitions returns the entries of after (an instance's new
// history) that before (its previous one) did not hold. Histories only
// grow at the end and are trimmed at the front, so the new entries follow
// the last old one; if that one was trimmed away too, they are those
// recorded after it.
func addedTransitions(before, after []domain.Transition) []domain.Transition {
	if len(before) == 0 {
		return after
	}
	last := before[len(before)-1]
	for i := len(after) - 1; i >= 0; i-- {
		if after[i].Same(last) {
			return after[i+1:]
		}
	}
	for i, t := range after {
		if t.At.After(last.At) {
			return after[i:]
		}
	}
	return nil
}
