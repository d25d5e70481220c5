package domain

import (
	"errors"
	"fmt"
)

// MoveRule declares one move of the state machine: from a state to
// another, on the events listed (by EventName).
type MoveRule struct {
	From, To State
	Events   []string
	// Why says when the move happens.
	Why string
}

// Event names, for the table below.
const (
	evStartCreate     = "StartCreate"
	evCreateFailed    = "CloudCreateFailed"
	evObserved        = "CloudObserved"
	evTerminated      = "CloudTerminated"
	evTerminateFailed = "CloudTerminateFailed"
	evHookFinished    = "HookFinished"
	evNodeReady       = "NodeReady"
	evDeleteRequested = "DeleteRequested"
	evCancel          = "Cancel"
	evStartDelete     = "StartDelete"
	evTick            = "Tick"
	evRetry           = "Retry"
	evVMGone          = "VMGone"
	evNodeGone        = "NodeGone"
)

// Transitions is every move the machine (Apply) makes; one event may make
// several in a row (Created -> Joined -> Running when there is no hook and
// no cluster), each listed here under that event. Apply refuses, as an
// invalid transition, a move missing from this table: that is a bug in the
// machine, and the record is not written. Events that change an instance
// without moving it (a create result recorded, a retry scheduled, a
// creation marked failed, a deadline set) are not moves.
var Transitions = []MoveRule{
	{StatePending, StateCreating, []string{evStartCreate}, "the instance joins a create batch"},
	{StatePending, StateDeleted, []string{evDeleteRequested, evCancel}, "cancelled before any cloud call"},

	{StateCreating, StatePending, []string{evCreateFailed, evRetry}, "a retryable create failure, or an operator's retry of a failed creation, waits for the next batch"},
	{StateCreating, StateCreated, []string{evObserved}, "the VM is running with an IP"},
	{StateCreating, StatePendingDeletion, []string{evDeleteRequested}, "deletion requested during creation"},

	{StateCreated, StateJoined, []string{evObserved, evHookFinished, evTick, evRetry}, "the after_created hook succeeded, or the group has none"},
	{StateCreated, StatePendingDeletion, []string{evDeleteRequested}, "deletion requested"},
	{StateCreated, StateDeleted, []string{evVMGone}, "the VM vanished"},

	{StateJoined, StateRunning, []string{evNodeReady, evObserved, evHookFinished, evTick, evRetry}, "the Node is Ready (or no cluster is configured)"},
	{StateJoined, StatePendingDeletion, []string{evDeleteRequested}, "deletion requested"},
	{StateJoined, StateDeleted, []string{evVMGone}, "the VM vanished"},

	{StateRunning, StatePendingDeletion, []string{evDeleteRequested, evNodeGone, evTick}, "deletion requested, or the Node was deleted and did not come back"},
	{StateRunning, StateDeleted, []string{evVMGone}, "the VM vanished"},

	{StatePendingDeletion, StateDeleting, []string{evStartDelete, evHookFinished, evDeleteRequested, evTick, evRetry, evNodeGone},
		"the before_delete hook finished, failed (not blocking), was skipped or forced past"},
	{StatePendingDeletion, StateDeleted, []string{evVMGone}, "the VM vanished"},

	{StateDeleting, StateDeleted, []string{
		evTerminated, evTerminateFailed, evCreateFailed, evVMGone, evTick, evRetry,
		evStartDelete, evHookFinished, evDeleteRequested, evNodeGone,
	}, "the VM is terminated, gone, or was never created"},
}

type moveKey struct {
	from, to State
	event    string
}

// declared indexes Transitions.
var declared = func() map[moveKey]bool {
	m := map[moveKey]bool{}
	for _, r := range Transitions {
		for _, ev := range r.Events {
			m[moveKey{r.From, r.To, ev}] = true
		}
	}
	return m
}()

// Declared reports whether Transitions has the move from -> to on event.
func Declared(from, to State, event string) bool {
	return declared[moveKey{from, to, event}]
}

// ErrUndeclaredMove is returned (wrapped, with ErrInvalidTransition) by
// Apply for a move missing from Transitions.
var ErrUndeclaredMove = errors.New("move not in the transition table")

func undeclared(from, to State, event string) error {
	return fmt.Errorf("%w: %w: %s -> %s on %s", ErrInvalidTransition, ErrUndeclaredMove, from, to, event)
}
