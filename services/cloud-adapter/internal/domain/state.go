// Package domain holds the cloud adapter's pure rules: provider-neutral VM
// states, how a create batch is split into cloud calls with derived
// ClientTokens, the tags every VM carries, and when a watched instance is
// settled; and the commands and events the application handles
// (messages.go). It imports only the standard library and libs/contract
// (the shared vocabulary of error kinds).
package domain

import "time"

// State is a provider-neutral VM state. Each cloud adapter maps its own
// states onto these.
type State int

// States, in the order a VM usually passes through them.
const (
	StateUnknown State = iota
	StatePending
	StateRunning
	StateLaunchFailed
	StateStopped
	StateTerminating
	// StateNotFound is never reported by a cloud: it is what the adapter
	// concludes when a VM stays absent from Describe answers.
	StateNotFound
)

func (s State) String() string {
	switch s {
	case StatePending:
		return "PENDING"
	case StateRunning:
		return "RUNNING"
	case StateLaunchFailed:
		return "LAUNCH_FAILED"
	case StateStopped:
		return "STOPPED"
	case StateTerminating:
		return "TERMINATING"
	case StateNotFound:
		return "NOT_FOUND"
	default:
		return "UNKNOWN"
	}
}

// Status is one VM as the cloud describes it.
type Status struct {
	CloudID   string
	State     State
	PrivateIP string
	Zone      string
	CreatedAt time.Time
	// Tags are the VM's cloud tags (nodesmith's are listed in tags.go).
	Tags map[string]string
	// LaunchError is, for a LAUNCH_FAILED VM whose cloud says why, that
	// reason; nil otherwise.
	LaunchError *LaunchError
}
