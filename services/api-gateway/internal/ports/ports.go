// Package ports declares what the gateway's application needs from the
// outside world. Adapters implement these interfaces; the application only
// sees them.
package ports

import (
	"context"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// Revisions are the KV revisions an operation wrote, per bucket; zero means
// nothing was written in that bucket.
type Revisions struct {
	Groups    uint64
	Instances uint64
	Catalog   uint64
	// Adopted is an AdoptVMs answer: the outcome per VM.
	Adopted []AdoptOutcome
}

// Request is one lifecycle operation with its id.
type Request struct {
	// ID identifies the operation across attempts; Do fills one in when
	// it is empty.
	ID string
	Op Operation
}

// Operation is one of the operations below.
type Operation interface {
	// OpName names the operation in logs, spans and metric labels (the
	// operation's field name in nodesmith.lifecycle.v1.Request).
	OpName() string
}

// IncreaseSize adds Delta instances to Group.
type IncreaseSize struct {
	Group string
	Delta int32
}

// DecreaseTargetSize cancels Delta unfulfilled instances of Group.
type DecreaseTargetSize struct {
	Group string
	Delta int32
}

// NodeRef names a Kubernetes node as CA sends it.
type NodeRef struct {
	ProviderID  string
	Name        string
	Labels      map[string]string
	Annotations map[string]string
}

// DeleteNodes deletes nodes of Group.
type DeleteNodes struct {
	Group string
	Nodes []NodeRef
}

// SetTargetSize sets Group's target.
type SetTargetSize struct {
	Group      string
	TargetSize int32
}

// PutGroup creates or replaces a group definition (see app.Service.PutGroup).
// The adapter carries the group as its KV record.
type PutGroup struct {
	Group            *domain.NodeGroup
	ExpectedRevision uint64
	Upsert           bool
}

// DeleteGroup deletes a group definition still at ExpectedRevision.
type DeleteGroup struct {
	ID               string
	ExpectedRevision uint64
}

// InstanceActionKind is what InstanceAction does to an instance.
type InstanceActionKind int

// Instance actions.
const (
	// ActionUnspecified is no action (lifecycle rejects it).
	ActionUnspecified InstanceActionKind = iota
	// ActionRetry retries the instance's current step now.
	ActionRetry
	// ActionForceDelete deletes the instance whatever its state.
	ActionForceDelete
	// ActionCancel cancels the instance's pending work.
	ActionCancel
)

func (k InstanceActionKind) String() string {
	switch k {
	case ActionRetry:
		return "ACTION_RETRY"
	case ActionForceDelete:
		return "ACTION_FORCE_DELETE"
	case ActionCancel:
		return "ACTION_CANCEL"
	default:
		return "ACTION_UNSPECIFIED"
	}
}

// InstanceAction acts on one instance.
type InstanceAction struct {
	InstanceID string
	Action     InstanceActionKind
}

// PutCatalogEntry creates or replaces a catalog entry (the adapter
// carries it as its KV record).
type PutCatalogEntry struct {
	Entry            *domain.CatalogEntry
	ExpectedRevision uint64
	Upsert           bool
}

// DeleteCatalogEntry deletes the catalog entry of Kind ("templates",
// "accounts" or "hooks", app.KindTemplates...) named Name.
type DeleteCatalogEntry struct {
	Kind             string
	Name             string
	ExpectedRevision uint64
}

// ReleaseOrphans confirms the VMs the orphan reconciler holds back.
type ReleaseOrphans struct{}

// AdoptVM is one running VM to hand to a group.
type AdoptVM struct {
	CloudID    string
	NodeName   string
	ProviderID string
	PrivateIP  string
}

// AdoptVMs hands VMs nodesmith did not create to Group (DryRun: plans it).
type AdoptVMs struct {
	Group  string
	VMs    []AdoptVM
	DryRun bool
}

// AdoptResult is what an adoption did with one VM.
type AdoptResult int

// Adoption results.
const (
	AdoptUnspecified AdoptResult = iota
	// Adopted: the VM is the group's instance now (or would be, in a dry run).
	Adopted
	// AlreadyAdopted: the VM already was the group's instance.
	AlreadyAdopted
	// AdoptRefused: the VM was not adopted; the outcome's Message says why.
	AdoptRefused
)

// AdoptOutcome is the outcome of one VM of an AdoptVMs.
type AdoptOutcome struct {
	VM         AdoptVM
	Result     AdoptResult
	InstanceID string
	Message    string
}

// OpName implements Operation.
func (IncreaseSize) OpName() string { return "increase_size" }

// OpName implements Operation.
func (DecreaseTargetSize) OpName() string { return "decrease_target_size" }

// OpName implements Operation.
func (DeleteNodes) OpName() string { return "delete_nodes" }

// OpName implements Operation.
func (PutGroup) OpName() string { return "put_group" }

// OpName implements Operation.
func (DeleteGroup) OpName() string { return "delete_group" }

// OpName implements Operation.
func (SetTargetSize) OpName() string { return "set_target_size" }

// OpName implements Operation.
func (InstanceAction) OpName() string { return "instance_action" }

// OpName implements Operation.
func (PutCatalogEntry) OpName() string { return "put_catalog_entry" }

// OpName implements Operation.
func (DeleteCatalogEntry) OpName() string { return "delete_catalog_entry" }

// OpName implements Operation.
func (ReleaseOrphans) OpName() string { return "release_orphans" }

// OpName implements Operation.
func (AdoptVMs) OpName() string { return "adopt_vms" }

// Lifecycle performs state-changing operations on the lifecycle service,
// the only writer of state.
type Lifecycle interface {
	// Do sends req and waits for the lifecycle leader's answer, at most
	// until ctx ends. req.ID identifies the operation across attempts (Do
	// fills one in when it is empty); lifecycle applies an operation at
	// most once per id and answers a repeat with the first outcome, so Do
	// may retry an attempt that went unanswered.
	//
	// On success the operation was applied and the returned revisions are
	// those it wrote. Otherwise the error is a *domain.Error:
	//   - the code and message lifecycle answered (Reply.error): the
	//     operation was rejected and nothing was written;
	//   - Unavailable: no lifecycle leader answered (nothing was applied);
	//   - DeadlineExceeded: the request may have reached the leader but no
	//     answer came in time, so the outcome is unknown;
	//   - InvalidArgument: an operation the wire cannot carry (nothing was
	//     sent);
	//   - Internal: the answer could not be decoded.
	// Do retries on its own while no leader answers and after an
	// unanswered attempt, always with the same request id.
	Do(ctx context.Context, req Request) (Revisions, error)
}
