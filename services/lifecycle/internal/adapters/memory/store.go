// Package memory holds in-memory fakes of lifecycle's ports for unit tests.
package memory

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/protoconv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

var _ ports.Store = (*Store)(nil)

// Store is an in-memory ports.Store with the same compare-and-set and
// revision semantics as the KV adapter: one revision counter per bucket.
// Records are stored encoded, so callers cannot alias stored values, and
// FailNext programs errors for failure tests.
type Store struct {
	mu        sync.Mutex
	groups    bucket
	instances bucket
	catalog   bucket
	// failNext, when set, is returned by the next write call.
	failNext []error
	writes   int
	// hold is the orphan hold (HoldStore), at holdRev (0: none).
	hold           ports.OrphanHold
	holdRev        uint64
	holdSeq        uint64
	instancesEpoch int
	// removed logs the removal revision of every instance key removed
	// (InstanceFeed); instanceLists counts ListInstances calls.
	removed       map[string]uint64
	instanceLists int
}

type entry struct {
	data []byte
	rev  uint64
}

type bucket struct {
	seq  uint64
	data map[string]entry
}

func (b *bucket) create(key string, data []byte) (uint64, error) {
	if b.data == nil {
		b.data = map[string]entry{}
	}
	if _, ok := b.data[key]; ok {
		return 0, fmt.Errorf("creating %s: %w", key, ports.ErrConflict)
	}
	b.seq++
	b.data[key] = entry{data: data, rev: b.seq}
	return b.seq, nil
}

func (b *bucket) update(key string, data []byte, rev uint64) (uint64, error) {
	e, ok := b.data[key]
	if !ok || e.rev != rev {
		return 0, fmt.Errorf("updating %s at revision %d: %w", key, rev, ports.ErrConflict)
	}
	b.seq++
	b.data[key] = entry{data: data, rev: b.seq}
	return b.seq, nil
}

func (b *bucket) delete(key string, rev uint64) (uint64, error) {
	e, ok := b.data[key]
	if !ok || e.rev != rev {
		return 0, fmt.Errorf("deleting %s at revision %d: %w", key, rev, ports.ErrConflict)
	}
	b.seq++
	delete(b.data, key)
	return b.seq, nil
}

func (b *bucket) keys() []string {
	ks := make([]string, 0, len(b.data))
	for k := range b.data {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{} }

// FailNext makes the next write calls fail with errs, in order.
func (s *Store) FailNext(errs ...error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = append(s.failNext, errs...)
}

// Writes counts successful writes.
func (s *Store) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

func (s *Store) injected() error {
	if len(s.failNext) == 0 {
		return nil
	}
	err := s.failNext[0]
	s.failNext = s.failNext[1:]
	return err
}

func (s *Store) write(f func() (uint64, error)) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.injected(); err != nil {
		return 0, err
	}
	rev, err := f()
	if err == nil {
		s.writes++
	}
	return rev, err
}

// ListGroups implements ports.Store.
func (s *Store) ListGroups(context.Context) ([]ports.VersionedGroup, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ports.VersionedGroup
	for _, k := range s.groups.keys() {
		g, err := protoconv.UnmarshalGroup(s.groups.data[k].data)
		if err != nil {
			return nil, err
		}
		out = append(out, ports.VersionedGroup{Group: g, Revision: s.groups.data[k].rev})
	}
	return out, nil
}

// GetGroup implements ports.Store.
func (s *Store) GetGroup(_ context.Context, id string) (ports.VersionedGroup, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.groups.data[id]
	if !ok {
		return ports.VersionedGroup{}, fmt.Errorf("group %s: %w", id, ports.ErrNotFound)
	}
	g, err := protoconv.UnmarshalGroup(e.data)
	return ports.VersionedGroup{Group: g, Revision: e.rev}, err
}

// CreateGroup implements ports.Store.
func (s *Store) CreateGroup(_ context.Context, g domain.NodeGroup) (uint64, error) {
	data, err := proto.Marshal(protoconv.GroupToProto(g))
	if err != nil {
		return 0, err
	}
	return s.write(func() (uint64, error) { return s.groups.create(g.ID, data) })
}

// UpdateGroup implements ports.Store.
func (s *Store) UpdateGroup(_ context.Context, g domain.NodeGroup, rev uint64) (uint64, error) {
	data, err := proto.Marshal(protoconv.GroupToProto(g))
	if err != nil {
		return 0, err
	}
	return s.write(func() (uint64, error) { return s.groups.update(g.ID, data, rev) })
}

// DeleteGroup implements ports.Store.
func (s *Store) DeleteGroup(_ context.Context, id string, rev uint64) (uint64, error) {
	return s.write(func() (uint64, error) { return s.groups.delete(id, rev) })
}

// ListInstances implements ports.Store.
func (s *Store) ListInstances(context.Context) ([]*ports.VersionedInstance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.instanceLists++
	var out []*ports.VersionedInstance
	for _, k := range s.instances.keys() {
		i, err := protoconv.UnmarshalInstance(s.instances.data[k].data)
		if err != nil {
			return nil, err
		}
		out = append(out, &ports.VersionedInstance{Instance: i, Revision: s.instances.data[k].rev})
	}
	return out, nil
}

// GetInstance implements ports.Store.
func (s *Store) GetInstance(_ context.Context, group, id string) (ports.VersionedInstance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.instances.data[group+"."+id]
	if !ok {
		return ports.VersionedInstance{}, fmt.Errorf("instance %s: %w", id, ports.ErrNotFound)
	}
	i, err := protoconv.UnmarshalInstance(e.data)
	return ports.VersionedInstance{Instance: i, Revision: e.rev}, err
}

// CreateInstance implements ports.Store.
func (s *Store) CreateInstance(_ context.Context, i domain.Instance) (uint64, error) {
	data, err := proto.Marshal(protoconv.InstanceToProto(i))
	if err != nil {
		return 0, err
	}
	return s.write(func() (uint64, error) { return s.instances.create(i.Group+"."+i.ID, data) })
}

// UpdateInstance implements ports.Store.
func (s *Store) UpdateInstance(_ context.Context, i domain.Instance, rev uint64) (uint64, error) {
	data, err := proto.Marshal(protoconv.InstanceToProto(i))
	if err != nil {
		return 0, err
	}
	return s.write(func() (uint64, error) { return s.instances.update(i.Group+"."+i.ID, data, rev) })
}

// DeleteInstance implements ports.Store.
func (s *Store) DeleteInstance(_ context.Context, group, id string, rev uint64) (uint64, error) {
	return s.write(func() (uint64, error) {
		r, err := s.instances.delete(group+"."+id, rev)
		if err == nil {
			s.noteRemovedLocked(group+"."+id, r)
		}
		return r, err
	})
}

func (s *Store) noteRemovedLocked(key string, rev uint64) {
	if s.removed == nil {
		s.removed = map[string]uint64{}
	}
	s.removed[key] = rev
}

// InstanceLists counts ListInstances calls (full loads).
func (s *Store) InstanceLists() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.instanceLists
}

var _ ports.InstanceFeed = (*Store)(nil)

// InstancesPos implements ports.InstanceFeed.
func (s *Store) InstancesPos(context.Context) (ports.FeedPos, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ports.FeedPos{Store: fmt.Sprintf("instances-%d", s.instancesEpoch), Rev: s.instances.seq}, nil
}

// InstancesSince implements ports.InstanceFeed.
func (s *Store) InstancesSince(_ context.Context, pos ports.FeedPos) (ports.InstanceChanges, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := ports.FeedPos{Store: fmt.Sprintf("instances-%d", s.instancesEpoch), Rev: s.instances.seq}
	if cur.Store != pos.Store || cur.Rev < pos.Rev {
		return ports.InstanceChanges{}, fmt.Errorf("instances from revision %d: %w", pos.Rev, ports.ErrFeedGap)
	}
	out := ports.InstanceChanges{Removed: map[string]uint64{}, Pos: cur}
	for _, k := range s.instances.keys() {
		e := s.instances.data[k]
		if e.rev <= pos.Rev {
			continue
		}
		i, err := protoconv.UnmarshalInstance(e.data)
		if err != nil {
			return ports.InstanceChanges{}, err
		}
		out.Changed = append(out.Changed, ports.VersionedInstance{Instance: i, Revision: e.rev})
	}
	for k, rev := range s.removed {
		if rev > pos.Rev {
			_, id, _ := strings.Cut(k, ".")
			out.Removed[id] = rev
		}
	}
	return out, nil
}

// RemovalsKept implements ports.InstanceFeed: removals are kept forever.
func (s *Store) RemovalsKept() time.Duration { return 0 }

var _ ports.HoldStore = (*Store)(nil)

// GetOrphanHold implements ports.HoldStore. The hold has its own revision
// sequence here (the KV store shares the groups bucket's), so that it does
// not shift the revisions group tests expect; it neither counts as a
// write nor takes an error programmed by FailNext.
func (s *Store) GetOrphanHold(context.Context) (ports.OrphanHold, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holdRev == 0 {
		return ports.OrphanHold{}, 0, fmt.Errorf("orphan hold: %w", ports.ErrNotFound)
	}
	return cloneHold(s.hold), s.holdRev, nil
}

// PutOrphanHold implements ports.HoldStore.
func (s *Store) PutOrphanHold(_ context.Context, h ports.OrphanHold, rev uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev != s.holdRev {
		return 0, fmt.Errorf("orphan hold at revision %d: %w", rev, ports.ErrConflict)
	}
	s.holdSeq++
	s.hold, s.holdRev = cloneHold(h), s.holdSeq
	return s.holdRev, nil
}

// InstancesBucketID implements ports.HoldStore.
func (s *Store) InstancesBucketID(context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("instances-%d", s.instancesEpoch), nil
}

// LoseInstances deletes every instance record and recreates the bucket
// (state loss): InstancesBucketID changes.
func (s *Store) LoseInstances() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.instances = bucket{}
	s.removed = nil
	s.instancesEpoch++
}

// ClearInstances deletes every instance record key by key: the bucket
// stays (InstancesBucketID does not change).
func (s *Store) ClearInstances() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.instances.seq++
	for k := range s.instances.data {
		delete(s.instances.data, k)
		s.noteRemovedLocked(k, s.instances.seq)
	}
}

func cloneHold(h ports.OrphanHold) ports.OrphanHold {
	if h.Held != nil {
		held := make(map[string]int, len(h.Held))
		for k, v := range h.Held {
			held[k] = v
		}
		h.Held = held
	}
	h.Waiting = append([]string(nil), h.Waiting...)
	h.Released = append([]string(nil), h.Released...)
	return h
}
