package domain

import "strings"

// InstanceState is an instance's lifecycle state. The numbers are those of
// nodesmith.state.v1.InstanceState, the record lifecycle writes; the app
// layer converts with a plain cast and a test keeps the two in step.
type InstanceState int32

// Instance states, in lifecycle order.
const (
	StateUnspecified     InstanceState = 0
	StatePending         InstanceState = 1
	StateCreating        InstanceState = 2
	StateCreated         InstanceState = 3
	StateJoined          InstanceState = 4
	StateRunning         InstanceState = 5
	StatePendingDeletion InstanceState = 6
	StateDeleting        InstanceState = 7
	StateDeleted         InstanceState = 8
)

var stateNames = [...]string{"UNSPECIFIED", "PENDING", "CREATING", "CREATED", "JOINED", "RUNNING", "PENDING_DELETION", "DELETING", "DELETED"}

// String is the upper snake name without prefix ("PENDING_DELETION").
func (s InstanceState) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "UNKNOWN"
}

// ParseInstanceState parses a state name case-insensitively; it accepts the
// proto spelling with its INSTANCE_STATE_ prefix too.
func ParseInstanceState(name string) (InstanceState, bool) {
	n := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(name)), "INSTANCE_STATE_")
	n = strings.ReplaceAll(n, "-", "_")
	for i, s := range stateNames {
		if i > 0 && s == n {
			return InstanceState(i), true
		}
	}
	return StateUnspecified, false
}

// InstanceStates lists the valid states in lifecycle order.
func InstanceStates() []InstanceState {
	return []InstanceState{StatePending, StateCreating, StateCreated, StateJoined, StateRunning, StatePendingDeletion, StateDeleting, StateDeleted}
}

// Live reports whether an instance in s still has (or will have) a VM that
// may back a Node. DELETED records are kept only for history.
func (s InstanceState) Live() bool { return s >= StatePending && s < StateDeleted }

// CAState is how Cluster Autoscaler sees an instance
// (externalgrpc InstanceStatus.InstanceState).
type CAState int32

// CA instance states; the numbers are the externalgrpc enum's.
const (
	CAStateNone     CAState = 0
	CAStateRunning  CAState = 1
	CAStateCreating CAState = 2
	CAStateDeleting CAState = 3
)

// CAStateOf maps an instance state to what NodeGroupNodes reports. reported
// is false for instances CA must not see (DELETED, or a corrupt state): CA
// counts every reported instance against the group, so a terminal record
// would look like a VM that never registers.
//
// Everything before RUNNING is "creating" (the VM is not a Ready node yet,
// and CA's registration deadline applies to it), RUNNING is "running", and
// the deletion states are "deleting" so CA does not count them as upcoming
// capacity.
func CAStateOf(s InstanceState) (state CAState, reported bool) {
	switch s {
	case StatePending, StateCreating, StateCreated, StateJoined:
		return CAStateCreating, true
	case StateRunning:
		return CAStateRunning, true
	case StatePendingDeletion, StateDeleting:
		return CAStateDeleting, true
	}
	return CAStateNone, false
}

// CA's instance error classes (cloudprovider.InstanceErrorClass).
const (
	ErrorClassOutOfResources int32 = 1
	ErrorClassOther          int32 = 99
)

// ErrorClass normalises a recorded error class to one CA understands:
// OutOfResources stays, anything else is Other. CA backs a group off
// differently for capacity errors, so guessing "out of resources" for an
// unknown class would be wrong.
func ErrorClass(recorded int32) int32 {
	if recorded == ErrorClassOutOfResources {
		return ErrorClassOutOfResources
	}
	return ErrorClassOther
}

// CreationFailedCode is reported when a record says its creation failed but
// carries no error code: CA ignores errorInfo with an empty code.
const CreationFailedCode = "CreationFailed"
