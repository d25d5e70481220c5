package app

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// next returns the watch's next buffered event, failing if there is none:
// the read model publishes synchronously, so every change a test applied
// is buffered by the time the call returns.
func next(t *testing.T, w *Watch) WatchEvent {
	t.Helper()
	select {
	case ev := <-w.Events():
		return ev
	default:
		t.Fatal("no event buffered")
		return WatchEvent{}
	}
}

func noEvent(t *testing.T, w *Watch) {
	t.Helper()
	select {
	case ev := <-w.Events():
		t.Fatalf("unexpected event %+v", ev)
	default:
	}
}

func at(sec int64) time.Time { return time.Unix(sec, 0) }

func withHistory(in *domain.Instance, h ...domain.Transition) *domain.Instance {
	in.History = h
	return in
}

// Changes reach a watch in the order they were applied: an instance's new
// transitions, then its group's new counts; group edits and deletes; a
// replayed (same revision) value is no change.
func TestWatchDeliversChangesInOrder(t *testing.T) {
	m := syncedModel()
	m.PutGroup("web", 1, testGroup("web", 0, 10, 1))
	m.PutInstance("web.i-1", 2, testInstance("web", "i-1", stateRunning))

	w, snap := m.Watch("", 16)
	defer w.Close()
	if len(snap) != 1 || snap[0].Group.Record.ID != "web" || snap[0].Counts[domain.StateRunning] != 1 {
		t.Fatalf("snapshot = %+v", snap)
	}

	created := domain.NewTransition(domain.StateUnspecified, statePending, "created", at(10))
	m.PutInstance("web.i-2", 3, withHistory(testInstance("web", "i-2", statePending), created))
	ev := next(t, w)
	if ev.Kind != WatchTransition || ev.Transition.Instance != "i-2" || ev.Transition.Transition.To != statePending {
		t.Fatalf("first event = %+v, want the creation transition", ev)
	}
	ev = next(t, w)
	if ev.Kind != WatchGroup || ev.GroupID != "web" || ev.Counts[domain.StatePending] != 1 || ev.Counts[domain.StateRunning] != 1 {
		t.Fatalf("second event = %+v, want web's counts", ev)
	}

	dispatched := domain.NewTransition(statePending, stateCreating, "dispatched", at(11))
	m.PutInstance("web.i-2", 4, withHistory(testInstance("web", "i-2", stateCreating), created, dispatched))
	if ev = next(t, w); ev.Kind != WatchTransition || ev.Transition.Transition.Reason != "dispatched" {
		t.Fatalf("event = %+v, want the dispatch", ev)
	}
	if ev = next(t, w); ev.Kind != WatchGroup || ev.Counts[domain.StateCreating] != 1 || ev.Counts[domain.StatePending] != 0 {
		t.Fatalf("event = %+v, want counts with one CREATING", ev)
	}

	// The same revision again (a re-established KV watch) is no change; a
	// new revision in the same state changes no counts.
	m.PutInstance("web.i-2", 4, withHistory(testInstance("web", "i-2", stateCreating), created, dispatched))
	m.PutInstance("web.i-2", 5, withHistory(testInstance("web", "i-2", stateCreating), created, dispatched))
	noEvent(t, w)

	m.PutGroup("web", 6, testGroup("web", 0, 10, 3))
	if ev = next(t, w); ev.Kind != WatchGroup || ev.Group.Record.TargetSize != 3 || ev.Group.Revision != 6 || ev.Counts[domain.StateCreating] != 1 {
		t.Fatalf("event = %+v, want the new target", ev)
	}
	m.PutGroup("web", 6, testGroup("web", 0, 10, 3))
	noEvent(t, w)

	m.DeleteInstance("web.i-1", 7)
	if ev = next(t, w); ev.Kind != WatchGroup || ev.Counts[domain.StateRunning] != 0 {
		t.Fatalf("event = %+v, want counts without the deleted record", ev)
	}
	m.DeleteGroup("web", 8)
	if ev = next(t, w); ev.Kind != WatchGroupDeleted || ev.GroupID != "web" {
		t.Fatalf("event = %+v, want the delete", ev)
	}
	m.DeleteGroup("web", 9) // already gone
	noEvent(t, w)
}

// A watch of one group sees only that group's changes.
func TestWatchFiltersByGroup(t *testing.T) {
	m := syncedModel()
	m.PutGroup("web", 1, testGroup("web", 0, 10, 1))
	m.PutGroup("gpu", 2, testGroup("gpu", 0, 4, 0))
	w, snap := m.Watch("gpu", 16)
	defer w.Close()
	if len(snap) != 1 || snap[0].Group.Record.ID != "gpu" {
		t.Fatalf("snapshot = %+v", snap)
	}
	m.PutGroup("web", 3, testGroup("web", 0, 10, 2))
	m.PutInstance("web.i-1", 4, testInstance("web", "i-1", statePending))
	m.DeleteGroup("web", 5)
	noEvent(t, w)
	m.PutInstance("gpu.i-2", 6, testInstance("gpu", "i-2", statePending))
	if ev := next(t, w); ev.Kind != WatchGroup || ev.GroupID != "gpu" {
		t.Fatalf("event = %+v", ev)
	}
}

// A watch whose buffer is full never holds up the read model: its
// pending changes are dropped, Lost is signalled, and Resync gives a
// snapshot of the current state from which changes flow again.
func TestWatchSlowSubscriberResyncs(t *testing.T) {
	m := syncedModel()
	m.PutGroup("web", 1, testGroup("web", 0, 100, 0))
	w, _ := m.Watch("", 2)
	defer w.Close()

	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 50 {
			m.PutGroup("web", uint64(2+i), testGroup("web", 0, 100, int32(i+1)))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the read model blocked on a subscriber that does not read")
	}
	select {
	case <-w.Lost():
	default:
		t.Fatal("Lost not signalled")
	}
	snap := w.Resync()
	if len(snap) != 1 || snap[0].Group.Record.TargetSize != 50 {
		t.Fatalf("resync snapshot = %+v, want target 50", snap)
	}
	noEvent(t, w) // the stale changes are gone
	select {
	case <-w.Lost():
		t.Fatal("Lost still signalled after Resync")
	default:
	}
	m.PutGroup("web", 100, testGroup("web", 0, 100, 7))
	if ev := next(t, w); ev.Group.Record.TargetSize != 7 {
		t.Fatalf("event after resync = %+v", ev)
	}
}

// Deletes missed while the KV watch was down (pruned at re-sync) and a
// reloaded bucket are not reported one by one: every watch resyncs.
func TestWatchResyncsAfterPruneAndReset(t *testing.T) {
	m := syncedModel()
	m.PutGroup("web", 1, testGroup("web", 0, 10, 1))
	m.PutGroup("old", 2, testGroup("old", 0, 10, 1))
	w, _ := m.Watch("", 16)
	defer w.Close()

	m.MarkSynced(BucketGroups, map[string]struct{}{"web": {}, "old": {}})
	select {
	case <-w.Lost():
		t.Fatal("resync without a change")
	default:
	}
	m.MarkSynced(BucketGroups, map[string]struct{}{"web": {}})
	select {
	case <-w.Lost():
	default:
		t.Fatal("no resync after a prune")
	}
	if snap := w.Resync(); len(snap) != 1 {
		t.Fatalf("snapshot = %+v", snap)
	}

	m.PutInstance("web.i-1", 3, testInstance("web", "i-1", stateRunning))
	next(t, w)
	m.ResetBucket(BucketInstances)
	// The new bucket's records arrive as a load, not as creations.
	m.PutInstance("web.i-9", 1, withHistory(testInstance("web", "i-9", stateRunning),
		domain.NewTransition(domain.StateUnspecified, statePending, "", at(1)), domain.NewTransition(statePending, stateRunning, "", at(2))))
	noEvent(t, w)
	m.MarkSynced(BucketInstances, map[string]struct{}{"web.i-9": {}})
	select {
	case <-w.Lost():
	default:
		t.Fatal("no resync after the reload")
	}
	if snap := w.Resync(); snap[0].Counts[domain.StateRunning] != 1 {
		t.Fatalf("snapshot = %+v", snap)
	}
	m.PutInstance("web.i-10", 2, testInstance("web", "i-10", statePending))
	next(t, w) // published again
}

func TestWatchClose(t *testing.T) {
	m := syncedModel()
	w, _ := m.Watch("", 1)
	if m.Watchers() != 1 {
		t.Fatal("not registered")
	}
	w.Close()
	w.Close()
	if m.Watchers() != 0 {
		t.Fatal("still registered")
	}
	m.PutGroup("web", 1, testGroup("web", 0, 10, 1))
	noEvent(t, w)
}

func TestAddedTransitions(t *testing.T) {
	tr := func(sec int64, reason string) domain.Transition {
		return domain.NewTransition(statePending, stateCreating, reason, at(sec))
	}
	a, b, c, d := tr(1, "a"), tr(2, "b"), tr(3, "c"), tr(4, "d")
	tests := []struct {
		name          string
		before, after []domain.Transition
		want          []string
	}{
		{"new instance", nil, []domain.Transition{a}, []string{"a"}},
		{"appended", []domain.Transition{a}, []domain.Transition{a, b, c}, []string{"b", "c"}},
		{"unchanged", []domain.Transition{a, b}, []domain.Transition{a, b}, nil},
		{"trimmed at the front", []domain.Transition{a, b}, []domain.Transition{b, c}, []string{"c"}},
		{"last old one trimmed away", []domain.Transition{a, b}, []domain.Transition{c, d}, []string{"c", "d"}},
		{"an equal copy", []domain.Transition{a}, []domain.Transition{a, b}, []string{"b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, x := range addedTransitions(tt.before, tt.after) {
				got = append(got, x.Reason)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// The per-state counts kept with every change equal a recount, whatever
// the sequence of puts, state changes, replays, deletes, prunes and resets.
func TestGroupCountsFollowChanges(t *testing.T) {
	m := syncedModel()
	states := []domain.InstanceState{statePending, stateCreating, stateRunning, stateDeleting, stateDeleted}
	rng := rand.New(rand.NewPCG(1, 2))
	recount := func(group string) map[domain.InstanceState]int {
		out := map[domain.InstanceState]int{}
		for _, v := range m.GroupInstances(group, nil) {
			out[v.State()]++
		}
		return out
	}
	rev := uint64(0)
	for step := range 3000 {
		group := []string{"web", "gpu"}[rng.IntN(2)]
		key := fmt.Sprintf("%s.i-%d", group, rng.IntN(20))
		rev++
		switch op := rng.IntN(20); {
		case op < 14:
			// Occasionally a record names another group than its key.
			g := group
			if op == 0 {
				g = "other"
			}
			_, id, _ := strings.Cut(key, ".")
			m.PutInstance(key, rev, testInstance(g, id, states[rng.IntN(len(states))]))
		case op < 18:
			m.DeleteInstance(key, rev)
		case op < 19:
			seen := map[string]struct{}{}
			for _, v := range m.Instances(func(InstanceView) bool { return rng.IntN(4) > 0 }) {
				seen[v.Key] = struct{}{}
			}
			m.MarkSynced(BucketInstances, seen)
		default:
			m.ResetBucket(BucketInstances)
			m.MarkSynced(BucketInstances, nil)
		}
		for _, g := range []string{"web", "gpu", "other"} {
			got, _ := m.GroupCounts(g)
			if want := recount(g); !maps.Equal(got, want) {
				t.Fatalf("step %d, group %s: counts %v, recount %v", step, g, got, want)
			}
		}
	}
}
