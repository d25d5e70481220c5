package domain

import (
	"strings"
	"time"
)

// SpotInterrupted reports that the cloud announced the reclaim of the
// instance's spot VM: the node agent tainted its Node (contract
// TaintSpotInterruption) and annotated the termination time.
type SpotInterrupted struct {
	NodeName string
	// TerminationTime is when the cloud takes the VM back (zero: unknown);
	// the before_delete hook must be done by then.
	TerminationTime time.Time
}

func (SpotInterrupted) eventName() string { return evSpotInterrupted }

// ReasonInterrupted starts the history reason of every move of an
// instance whose spot VM is being reclaimed by the cloud.
const ReasonInterrupted = "interrupted"

// minInterruptHook is the least notice worth running the before_delete
// hook for: with less left, the deletion goes straight to terminating.
const minInterruptHook = 5 * time.Second

// Interrupted reports whether the instance's deletion was started by a
// spot interruption (its last move to PendingDeletion says so).
func (i Instance) Interrupted() bool {
	for k := len(i.History) - 1; k >= 0; k-- {
		if t := i.History[k]; t.To == StatePendingDeletion && t.From != StatePendingDeletion {
			return strings.HasPrefix(t.Reason, ReasonInterrupted)
		}
	}
	return false
}

// spotInterrupted deletes a live instance whose VM the cloud reclaims,
// without lowering the group's target: like a lost Node, it is released,
// so the group is one short and the dispatcher creates the replacement at
// once. The before_delete hook (the drain) runs now, outside the delete
// parallelism, and its deadline is the termination time; if it fails or
// runs out of time the deletion goes on (never blocks: the VM goes away
// regardless). Repeated notices change nothing.
func (m *machine) spotInterrupted(e SpotInterrupted) error {
	switch m.in.State {
	case StateCreated, StateJoined, StateRunning:
	case StatePending, StateCreating:
		return m.ignore("no Node can be interrupted before the VM runs")
	default:
		return m.ignore("already being deleted")
	}
	reason := ReasonInterrupted + ": the cloud reclaims the spot VM"
	if !e.TerminationTime.IsZero() {
		reason += " at " + e.TerminationTime.UTC().Format(time.RFC3339)
	}
	m.in.Released = true
	m.progress()
	m.move(StatePendingDeletion, reason)
	m.beforeDelete(e.TerminationTime)
	return nil
}
