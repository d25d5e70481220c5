package app

import "github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"

// Observer receives what the App does, for metrics. Implementations must be
// fast and safe for concurrent use; they are called with the App's lock held.
type Observer interface {
	// Transition is called for every state change of an instance.
	Transition(group string, m domain.Move)
	// CreationFailed is called when an instance's creation is given up.
	CreationFailed(group string, class int32)
	// Op is called for every operation with its outcome.
	Op(op string, code domain.Code)
	// Published is called for every command publication attempt.
	Published(kind domain.CommandKind, err error)
	// Purged counts purged Deleted records.
	Purged(n int)
	// Reconciled counts orphan VMs terminated and records closed because
	// their VM vanished.
	Reconciled(orphansTerminated, vanishedClosed int)
	// OrphansFound counts the orphan VMs one inventory comparison found
	// (whether or not terminating them succeeded).
	OrphansFound(n int)
	// ConfigApplied is called after each application of the file.
	ConfigApplied(err error)
	// Replayed is called when a repeated request id is answered with the
	// outcome of its first attempt instead of being applied again.
	Replayed()
}

// NopObserver records nothing.
type NopObserver struct{}

// Transition implements Observer.
func (NopObserver) Transition(string, domain.Move) {}

// CreationFailed implements Observer.
func (NopObserver) CreationFailed(string, int32) {}

// Op implements Observer.
func (NopObserver) Op(string, domain.Code) {}

// Published implements Observer.
func (NopObserver) Published(domain.CommandKind, error) {}

// Purged implements Observer.
func (NopObserver) Purged(int) {}

// Reconciled implements Observer.
func (NopObserver) Reconciled(int, int) {}

// OrphansFound implements Observer.
func (NopObserver) OrphansFound(int) {}

// ConfigApplied implements Observer.
func (NopObserver) ConfigApplied(error) {}

// Replayed implements Observer.
func (NopObserver) Replayed() {}

// GroupStats is a snapshot of one group for gauges.
type GroupStats struct {
	Target, Min, Max int
	// ByState counts instances per state.
	ByState map[domain.State]int
	// CreationFailed counts live instances whose creation failed.
	CreationFailed int
	// Live counts the instances CA sees as the group's nodes.
	Live int
	// PastDeadline counts, per state, instances whose wait timed out and
	// was not yet acted on. The dispatcher fires deadlines within a tick,
	// so a count that stays above zero means instances are stuck.
	PastDeadline map[domain.State]int
}

// Stats returns a snapshot per group (for gauges, read at scrape time).
func (a *App) Stats() map[string]GroupStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.loaded {
		return nil
	}
	now := a.clock.Now()
	out := make(map[string]GroupStats, len(a.groups))
	for id, g := range a.groups {
		out[id] = GroupStats{Target: g.g.TargetSize, Min: g.g.MinSize, Max: g.g.MaxSize,
			ByState: map[domain.State]int{}, PastDeadline: map[domain.State]int{}}
	}
	for _, r := range a.insts {
		s, ok := out[r.Instance.Group]
		if !ok {
			continue
		}
		s.ByState[r.Instance.State]++
		if !r.Instance.Deadline.IsZero() && !now.Before(r.Instance.Deadline) {
			s.PastDeadline[r.Instance.State]++
		}
		if r.Instance.Live() {
			s.Live++
		}
		if r.Instance.CreationFailed && r.Instance.Live() {
			s.CreationFailed++
		}
		out[r.Instance.Group] = s
	}
	return out
}
