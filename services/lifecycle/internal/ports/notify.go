package ports

import (
	"context"
	"time"
)

// Notice is a human-facing note about an instance, recorded on its Node
// (a Kubernetes Event): where operators look first (kubectl describe node).
type Notice struct {
	// Node is the name of the Node the notice is about.
	Node string
	// Warning marks a problem; otherwise the notice is informational.
	Warning bool
	// Reason is a short CamelCase machine-readable reason.
	Reason string
	// Message says what happened, for humans.
	Message string
}

// Notifier records notices. Notices are not state: Notify never blocks and
// may drop notices (rate limits, a full queue, an unreachable API server).
type Notifier interface {
	Notify(n Notice)
}

// GroupStatus summarises one node group.
type GroupStatus struct {
	ID                           string
	MinSize, MaxSize, TargetSize int
	// Instances counts instances per state name (Deleted ones excepted).
	Instances map[string]int
	// CreationFailed counts live instances whose creation failed.
	CreationFailed int
	// NodeLost counts Running instances waiting for their deleted Node to
	// register again.
	NodeLost int
}

// InstanceError is the last error of one instance.
type InstanceError struct {
	Group, Instance, State, Code, Message string
	At                                    time.Time
}

// OrphanStatus is what the reconciler holds back instead of terminating.
type OrphanStatus struct {
	// Held counts the orphan VMs the latest comparisons held back, by
	// reason: "empty_start" (the start-up hold), "implausible" (too many
	// to be orphans: state loss or a shared cluster id), "cap" (over the
	// per-pass cap, terminated in later passes). Nil when none.
	Held map[string]int
	// HoldSince and HoldUntil bound the start-up hold; zero when none is
	// active.
	HoldSince, HoldUntil time.Time
	// Waiting lists the cloud ids held until an operator releases them
	// (start-up hold and implausible), oldest first, bounded.
	Waiting []string
}

// Status is the summary of every node group for operators.
type Status struct {
	// Groups are sorted by id.
	Groups []GroupStatus
	// RecentErrors are the newest last errors of instances, newest first,
	// bounded.
	RecentErrors []InstanceError
	// Orphans is what the orphan reconciler holds back.
	Orphans OrphanStatus
}

// StatusSink publishes the status summary (a ConfigMap in Kubernetes). The
// caller writes at most every status interval and only when the summary
// changed; an error is logged and the write retried at the next interval.
type StatusSink interface {
	WriteStatus(ctx context.Context, s Status) error
}
