package app

import (
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// instIndex indexes the cached instances for the dispatcher. It is updated
// on every change of the cache (setInstLocked, dropInstLocked), so a
// dispatcher pass costs O(instances with work) rather than O(instances): at
// 5000 instances walking and sorting every record per pass halved the
// throughput of a scale-up (docs/performance.md, B2).
type instIndex struct {
	// byGroup: every instance id of a group.
	byGroup map[string]map[string]struct{}
	// live counts a group's instances that count toward its target.
	live map[string]int
	// active: the instances not at rest (see atRest): the only ones a
	// pass can have work for.
	active map[string]struct{}
	// batches: the members not at rest of each create batch (whether a
	// batch still waits for create results; the full membership, needed
	// rarely, is found through byGroup). Members at rest are left out so
	// the index stays proportional to the work, not to every record.
	batches map[string]map[string]struct{}
}

func newInstIndex() instIndex {
	return instIndex{
		byGroup: map[string]map[string]struct{}{},
		live:    map[string]int{},
		active:  map[string]struct{}{},
		batches: map[string]map[string]struct{}{},
	}
}

// atRest reports whether the dispatcher has nothing to do for an instance
// by itself: Running or Deleted with no command outstanding, no deadline
// and no retry due. (A Running instance can still lose its Node: the node
// check covers every Running instance when the Nodes change.)
func atRest(in domain.Instance) bool {
	return (in.State == domain.StateRunning || in.State == domain.StateDeleted) &&
		!in.InFlight && in.Deadline.IsZero() && in.NextRetryAt.IsZero()
}

func (x instIndex) add(in domain.Instance) {
	addTo(x.byGroup, in.Group, in.ID)
	if in.Live() {
		x.live[in.Group]++
	}
	if !atRest(in) {
		x.active[in.ID] = struct{}{}
		if in.BatchID != "" {
			addTo(x.batches, in.BatchID, in.ID)
		}
	}
}

func (x instIndex) remove(in domain.Instance) {
	removeFrom(x.byGroup, in.Group, in.ID)
	if in.Live() {
		if x.live[in.Group]--; x.live[in.Group] <= 0 {
			delete(x.live, in.Group)
		}
	}
	if _, ok := x.active[in.ID]; ok && in.BatchID != "" {
		removeFrom(x.batches, in.BatchID, in.ID)
	}
	delete(x.active, in.ID)
}

func addTo(m map[string]map[string]struct{}, key, id string) {
	set, ok := m[key]
	if !ok {
		set = map[string]struct{}{}
		m[key] = set
	}
	set[id] = struct{}{}
}

func removeFrom(m map[string]map[string]struct{}, key, id string) {
	if set, ok := m[key]; ok {
		delete(set, id)
		if len(set) == 0 {
			delete(m, key)
		}
	}
}
