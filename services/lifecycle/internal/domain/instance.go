package domain

import (
	"time"

	"github.com/nodesmith/nodesmith/libs/intern"
	"github.com/nodesmith/nodesmith/libs/providerid"
)

// Instance is one VM's record. Lifecycle is its only writer.
type Instance struct {
	// ID is assigned at creation (see NewInstanceID) and is also the Node name.
	ID    string
	Group string
	State State
	// Attempt is incremented for every command issued for the instance;
	// results carry it back, and a result for another attempt is stale.
	Attempt uint32
	CloudID string
	// ProviderID is always set: a placeholder until the cloud id is known,
	// then the rendered providerID.
	ProviderID string
	NodeName   string
	PrivateIP  string
	// BatchID and ClientToken identify the create call this instance is part
	// of. They are kept while a VM may exist for them and cleared when the
	// create definitively failed (so the next attempt uses a new token).
	BatchID     string
	ClientToken string
	LastError   *ErrorInfo
	CreatedAt   time.Time
	StateSince  time.Time
	// Deadline is when the current wait times out (zero: no deadline).
	Deadline time.Time
	// NextRetryAt is when a retry of the current step is due (zero: none).
	NextRetryAt time.Time
	History     []Transition
	SSHHostKey  string
	// HookOutputTail is the tail of the last hook's output.
	HookOutputTail string
	// TraceContext is the opaque trace context (a W3C traceparent and
	// tracestate carrier) of the operation that created or released the
	// instance; its later commands continue that trace. The domain never
	// interprets it, and it is replaced, never modified in place.
	TraceContext map[string]string

	// The small fields last, together: interleaved with the others they
	// padded the struct to the next size class (every cached record pays
	// it, issue 20).

	// Retries spent on the current step.
	Retries uint32
	// CreationFailed marks a creation that cannot succeed without help: it is
	// reported to CA as instanceCreating with LastError until CA (or an
	// operator) deletes or retries it.
	CreationFailed bool
	// InFlight is set while a command for the current step is outstanding.
	InFlight bool
	// Released is set once CA's target no longer counts the instance.
	Released bool
	// Adopted marks an instance that adopts an existing Node: it was not
	// created by a create batch, and its VM does not carry nodesmith's
	// cluster tag (the reconciler's inventory does not list it).
	Adopted bool
	// Zone, InstanceType and CapacityType say where the VM was created:
	// the offering its InstancesCreated named (empty for a template
	// without offerings: the template's zone and type).
	Zone         string
	InstanceType string
	CapacityType string
}

// ErrorInfo is an instance's last error as CA and operators see it.
type ErrorInfo struct {
	Code      string
	Message   string
	Class     int32
	Retryable bool
	At        time.Time
}

// Transition is one entry of an instance's bounded history.
type Transition struct {
	From   State
	To     State
	Reason string
	// at is when (zero when not recorded), compact: in each entry of
	// every record (issue 20).
	at intern.Time
}

// NewTransition returns the history entry of a move from -> to at at.
func NewTransition(from, to State, reason string, at time.Time) Transition {
	return Transition{From: from, To: to, Reason: reason, at: intern.TimeOf(at)}
}

// At returns when the move happened, in UTC (zero when not recorded).
func (t Transition) At() time.Time { return t.at.Time() }

// NewInstance returns a Pending instance of group.
func NewInstance(id, group string, now time.Time) Instance {
	return Instance{
		ID:         id,
		Group:      group,
		State:      StatePending,
		ProviderID: providerid.Placeholder(group, id),
		NodeName:   id,
		CreatedAt:  now,
		StateSince: now,
		History:    []Transition{NewTransition(StateUnknown, StatePending, "created", now)},
	}
}

// Live reports whether the instance counts toward its group's target size:
// it is on the creation side of the machine and deletion was not requested.
func (i Instance) Live() bool { return i.State.beforeDeletion() && !i.Released }

// AwaitingDeletionSlot reports whether the instance is in PendingDeletion
// and its deletion has not started (it waits for the group's delete
// parallelism).
func (i Instance) AwaitingDeletionSlot() bool {
	return i.State == StatePendingDeletion && !i.InFlight && i.NextRetryAt.IsZero() &&
		i.Deadline.IsZero() && i.LastError == nil
}

// DeletionActive reports whether the instance occupies a delete slot.
func (i Instance) DeletionActive() bool {
	return (i.State == StatePendingDeletion && !i.AwaitingDeletionSlot()) || i.State == StateDeleting
}

// CreateInFlight reports whether a create call for the instance is
// outstanding (it occupies a create slot).
func (i Instance) CreateInFlight() bool {
	return i.State == StateCreating && !i.CreationFailed
}

// ReadyToCreate reports whether the dispatcher may put the instance in a
// create batch now.
func (i Instance) ReadyToCreate(now time.Time) bool {
	return i.State == StatePending && !i.NextRetryAt.After(now)
}

// BlockedOnDeleteHook reports whether a failed before_delete hook with
// onFailure=block holds the instance until an operator acts.
func (i Instance) BlockedOnDeleteHook() bool {
	return i.State == StatePendingDeletion && !i.InFlight && i.NextRetryAt.IsZero() && i.LastError != nil
}

// NodeLost reports whether the instance is Running but its Node was deleted
// from the cluster: it waits (Deadline) for the Node to register again
// before it is replaced.
func (i Instance) NodeLost() bool {
	return i.State == StateRunning && !i.Deadline.IsZero()
}

// Node returns the name of the instance's Node.
func (i Instance) Node() string {
	if i.NodeName != "" {
		return i.NodeName
	}
	return i.ID
}
