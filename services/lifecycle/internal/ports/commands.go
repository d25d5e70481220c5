package ports

import (
	"context"
	"errors"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// Target is which cloud, account and region a command is for.
type Target struct {
	Provider, Account, Region string
}

// InstanceRef names an instance and the attempt a command belongs to.
type InstanceRef struct {
	InstanceID string
	Group      string
	Attempt    uint32
	CloudID    string
	// Adopted marks an instance that adopted a VM nodesmith did not
	// create: its VM lacks the cluster tag (see TerminateCommand).
	Adopted bool
}

// CreateCommand creates one VM per instance from one template.
type CreateCommand struct {
	BatchID     string
	ClientToken string
	// Attempt identifies this publication of the batch (the highest attempt
	// of its instances): the same batch and attempt is deduplicated.
	Attempt   uint32
	Group     string
	ClusterID string
	Template  domain.InstanceTemplate
	Instances []InstanceRef
	// Offerings are the template's offerings in the order to try them,
	// each with its capacity type resolved (domain.BatchOfferings); empty
	// for a template without offerings. MaxPrice is the template's, for
	// offerings that ask for spot capacity.
	Offerings []cloudspec.Offering
	MaxPrice  string
}

// WatchCommand follows launching VMs until RUNNING with an IP, failed or gone.
type WatchCommand struct {
	Target    Target
	Instances []InstanceRef
}

// TerminateCommand deletes VMs (already gone counts as done). The cloud
// adapter terminates only VMs tagged with ClusterID, or, for Adopted
// instances, VMs carrying no cluster tag at all; it refuses the others
// (a CloudTerminateFailed with code InstanceNotInCluster).
type TerminateCommand struct {
	Target    Target
	ClusterID string
	Instances []InstanceRef
}

// HookCommand runs a hook on an instance over SSH.
type HookCommand struct {
	InstanceID    string
	Group         string
	Attempt       uint32
	Kind          domain.HookKind
	HookName      string
	Host          string
	Port          uint32
	Script        string
	Env           map[string]string
	Timeout       time.Duration
	PinnedHostKey string
	// RedactedEnv names the entries of Env set by the operator (template
	// and hook env, not the standard variables): the runner keeps their
	// values out of logs and the output tail.
	RedactedEnv []string
}

// InventoryRequest asks for every VM tagged with the cluster id.
type InventoryRequest struct {
	RequestID string
	Target    Target
	ClusterID string
}

// TagCommand serves an explicit adoption (VMs nodesmith did not create):
// the cloud adapter describes the VMs and, unless CheckOnly, tags those
// that exist and carry no other cluster's tag with ClusterID, their group
// and their instance id. It answers with one TagResult (RequestID).
type TagCommand struct {
	RequestID string
	Target    Target
	ClusterID string
	Instances []InstanceRef
	CheckOnly bool
}

// ErrCommandQueueFull is wrapped by a Commands error when the command queue
// is at its limit (the command stream's MaxMsgs or MaxBytes) and refused
// the command: nothing was stored, the commands already queued are kept,
// and publishing again once the workers have drained the queue succeeds.
// Every other command published meanwhile would be refused as well.
var ErrCommandQueueFull = errors.New("command queue full")

// Commands publishes commands to the workers. A nil error means the command
// is durably stored; publishing the same command twice (same instance or
// batch and attempt; same request for an inventory or a tag) within the
// deduplication window stores it once, the first publication's content
// kept, even after the workers took it, and succeeds even when the queue
// is full. Errors (a done context among them) are transient and store
// nothing: the caller retries later. Commands carry no order between them.
// adapters/commandstest holds every implementation to this.
type Commands interface {
	Create(ctx context.Context, c CreateCommand) error
	Watch(ctx context.Context, c WatchCommand) error
	Terminate(ctx context.Context, c TerminateCommand) error
	RunHook(ctx context.Context, c HookCommand) error
	ListInventory(ctx context.Context, r InventoryRequest) error
	Tag(ctx context.Context, c TagCommand) error
}
