package domain

import "github.com/nodesmith/nodesmith/libs/contract"

// State is a step of the instance state machine. The numeric values equal
// nodesmith.state.v1.InstanceState so the store adapter maps them 1:1.
// int32 like them: a history entry (two states, a reason, a time) is 48
// bytes, not 56, in every cached record (issue 20).
type State int32

// The states every VM goes through:
//
//	Pending -> Creating -> Created -> Joined -> Running
//	  -> PendingDeletion -> Deleting -> Deleted
const (
	StateUnknown State = iota
	// StatePending: a record exists; no cloud call yet.
	StatePending
	// StateCreating: the create call was made (or is in flight); waiting
	// for the VM to be RUNNING with an IP.
	StateCreating
	// StateCreated: the VM runs; the after_created hook is due.
	StateCreated
	// StateJoined: the after_created hook succeeded; waiting for a Ready Node.
	StateJoined
	// StateRunning: a Ready Node carries this instance's providerID.
	StateRunning
	// StatePendingDeletion: deletion requested; the before_delete hook is due.
	StatePendingDeletion
	// StateDeleting: the terminate call was made (or is in flight).
	StateDeleting
	// StateDeleted: terminal; kept for the retention period, then purged.
	StateDeleted
)

// States lists every valid state in lifecycle order.
var States = []State{
	StatePending, StateCreating, StateCreated, StateJoined, StateRunning,
	StatePendingDeletion, StateDeleting, StateDeleted,
}

var stateNames = map[State]string{
	StateUnknown:         "Unknown",
	StatePending:         "Pending",
	StateCreating:        "Creating",
	StateCreated:         "Created",
	StateJoined:          "Joined",
	StateRunning:         "Running",
	StatePendingDeletion: "PendingDeletion",
	StateDeleting:        "Deleting",
	StateDeleted:         "Deleted",
}

func (s State) String() string {
	if n, ok := stateNames[s]; ok {
		return n
	}
	return "Unknown"
}

// Valid reports whether s is one of the eight states.
func (s State) Valid() bool { return s >= StatePending && s <= StateDeleted }

// beforeDeletion reports whether s is one of the creation-side states, in
// which an instance counts toward its group's target unless released.
func (s State) beforeDeletion() bool { return s >= StatePending && s <= StateRunning }

// HookKind names a hook (libs/contract); values equal
// nodesmith.hook.v1.HookKind.
type HookKind = contract.HookKind

// Hook kinds.
const (
	HookUnknown      = contract.HookUnspecified
	HookAfterCreated = contract.HookAfterCreated
	HookBeforeDelete = contract.HookBeforeDelete
)

// CloudState is a provider-neutral VM state; values equal
// nodesmith.cloud.v1.CloudState.
type CloudState int

// Cloud states as the cloud adapter reports them.
const (
	CloudUnknown CloudState = iota
	CloudPending
	CloudRunning
	CloudLaunchFailed
	CloudStopped
	CloudTerminating
	CloudNotFound
)

func (s CloudState) String() string {
	switch s {
	case CloudPending:
		return "PENDING"
	case CloudRunning:
		return "RUNNING"
	case CloudLaunchFailed:
		return "LAUNCH_FAILED"
	case CloudStopped:
		return "STOPPED"
	case CloudTerminating:
		return "TERMINATING"
	case CloudNotFound:
		return "NOT_FOUND"
	}
	return "UNKNOWN"
}

// ErrorKind is the provider-neutral class of a cloud error, with the one
// retry policy every service follows (contract.ErrorKind): only Throttled
// and Transient are retried; Unknown is definitive. Values equal
// nodesmith.cloud.v1.ErrorKind.
type ErrorKind = contract.ErrorKind

// CloudError is a cloud failure as the cloud adapter reports it.
type CloudError struct {
	Kind    ErrorKind
	Code    string
	Message string
}

// CA's instance error classes (cloudprovider.InstanceErrorClass).
const (
	ClassOutOfResources int32 = 1
	ClassOther          int32 = 99
)
