package app

import (
	"slices"
	"strings"
	"sync/atomic"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// WatchEventKind says what a WatchEvent reports.
type WatchEventKind int

// The kinds of change a Watch reports.
const (
	// WatchGroup: a group was created or changed, or its instance counts
	// did (Group and Counts are its new state).
	WatchGroup WatchEventKind = iota + 1
	// WatchGroupDeleted: the group GroupID is gone.
	WatchGroupDeleted
	// WatchTransition: an instance changed state (Transition).
	WatchTransition
)

// WatchEvent is one change of the read model, as of the moment it was
// applied. Every watch gets the same value: callers must not modify what
// it refers to.
type WatchEvent struct {
	Kind WatchEventKind
	// GroupID is the group the change belongs to (every kind).
	GroupID string
	// Group and Counts are set for WatchGroup.
	Group  GroupView
	Counts map[domain.InstanceState]int
	// Transition is set for WatchTransition.
	Transition TransitionView
}

// GroupSnapshot is one group with its instance counts per state.
type GroupSnapshot struct {
	Group  GroupView
	Counts map[domain.InstanceState]int
}

// Watch is one subscriber to the read model's changes (ReadModel.Watch).
// Changes are delivered in the order they were applied into a bounded
// buffer; the read model never waits for a subscriber. One that falls a
// whole buffer behind loses its pending changes: Lost is signalled, and
// Resync returns a fresh snapshot from which delivery resumes.
type Watch struct {
	m      *ReadModel
	group  string
	events chan WatchEvent
	lost   chan struct{}
	// overflowed is set by the writer when the buffer was full and cleared
	// by Resync; while set, changes are not buffered (the next snapshot
	// carries them).
	overflowed atomic.Bool
}

// Events delivers the changes, in order.
func (w *Watch) Events() <-chan WatchEvent { return w.events }

// Lost is signalled when changes were dropped because the buffer was full;
// the subscriber must then call Resync.
func (w *Watch) Lost() <-chan struct{} { return w.lost }

// Resync discards the buffered changes and returns the current snapshot;
// the changes applied after it are delivered from then on.
func (w *Watch) Resync() []GroupSnapshot {
	w.m.mu.RLock()
	defer w.m.mu.RUnlock()
	// The writer holds the lock for writing while it sends, so nothing is
	// sent between the drain and the snapshot.
	for {
		select {
		case <-w.events:
			continue
		case <-w.lost:
			continue
		default:
		}
		break
	}
	w.overflowed.Store(false)
	return w.m.snapshotLocked(w.group)
}

// Close ends the subscription. It may be called more than once.
func (w *Watch) Close() {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	delete(w.m.watches, w)
}

// Watch subscribes to the changes of group (every group when empty) with a
// buffer of buffer changes (at least 1), and returns the snapshot the
// changes start from. The caller must Close the Watch.
func (m *ReadModel) Watch(group string, buffer int) (*Watch, []GroupSnapshot) {
	w := &Watch{m: m, group: group, events: make(chan WatchEvent, max(buffer, 1)), lost: make(chan struct{}, 1)}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.watches == nil {
		m.watches = map[*Watch]struct{}{}
	}
	m.watches[w] = struct{}{}
	return w, m.snapshotLocked(group)
}

// Watchers returns how many Watches are open.
func (m *ReadModel) Watchers() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.watches)
}

// snapshotLocked returns group (every group when empty) with counts,
// sorted by id. Called with mu held.
func (m *ReadModel) snapshotLocked(group string) []GroupSnapshot {
	var out []GroupSnapshot
	for id, g := range m.groups {
		if group == "" || id == group {
			out = append(out, GroupSnapshot{Group: g.view, Counts: m.groupCountsLocked(id)})
		}
	}
	slices.SortFunc(out, func(a, b GroupSnapshot) int {
		return strings.Compare(a.Group.Record.ID, b.Group.Record.ID)
	})
	return out
}

// watched reports whether changes of bucket b are to be published now:
// someone watches, and b is not being reloaded after a reset (its records
// arrive again from scratch then; the watches get a snapshot once it is
// loaded). Called with mu held for writing.
func (m *ReadModel) watched(b Bucket) bool {
	return len(m.watches) > 0 && !m.reloading[b]
}

// publish hands ev to every watch of its group without ever blocking: a
// watch whose buffer is full is marked as having lost changes. Called with
// mu held for writing.
func (m *ReadModel) publish(ev WatchEvent) {
	for w := range m.watches {
		if w.group != "" && w.group != ev.GroupID {
			continue
		}
		if w.overflowed.Load() {
			continue
		}
		select {
		case w.events <- ev:
		default:
			w.overflowed.Store(true)
			select {
			case w.lost <- struct{}{}:
			default:
			}
		}
	}
}

// publishGroup publishes the current state of group id, if it exists.
// Called with mu held for writing.
func (m *ReadModel) publishGroup(id string) {
	g := m.groups[id]
	if g == nil {
		return // instances of a group that is gone (or not loaded yet)
	}
	m.publish(WatchEvent{Kind: WatchGroup, GroupID: id, Group: g.view, Counts: m.groupCountsLocked(id)})
}

// resyncAll makes every watch resync, for changes that are not reported
// one by one (records pruned after a watch was re-established, a bucket
// reloaded after a reset). Called with mu held for writing.
func (m *ReadModel) resyncAll() {
	for w := range m.watches {
		w.overflowed.Store(true)
		select {
		case w.lost <- struct{}{}:
		default:
		}
	}
}
