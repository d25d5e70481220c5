package domain

import (
	"fmt"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"
)

// The commands the cloud adapter consumes and the events it publishes, as
// the application sees them. The wire shapes (nodesmith.cloud.v1) are
// converted to and from these only in the adapters (adapters/protoconv).

// Target says which provider, account and region a command is for.
// Provider is a libs/cloudspec provider name.
type Target struct {
	Provider string
	Account  string
	Region   string
}

// InstanceRef names one lifecycle instance (and its VM, once it has one).
type InstanceRef struct {
	InstanceID string
	// Attempt is the instance's create attempt.
	Attempt uint32
	// CloudID is the VM's cloud id ("" before it was created).
	CloudID string
	Group   string
	// Adopted is set for an instance whose VM nodesmith did not create.
	Adopted bool
}

// Command is one cloud command: *CreateInstances, *WatchInstances,
// *TerminateInstances, *ListInventory or *TagInstances.
type Command interface{ isCommand() }

// CreateInstances creates a batch of VMs from one template.
type CreateInstances struct {
	BatchID     string
	ClientToken string
	Target      Target
	// TemplateName names the template (for logs and errors).
	TemplateName string
	// ParametersJSON are the provider's create parameters.
	ParametersJSON string
	Instances      []InstanceRef
	ClusterID      string
	Group          string
	Zone           string
	InstanceType   string
	// SecretParameters are sealed template parameters by name (libs/sealed
	// tokens), opened only for the cloud call.
	SecretParameters map[string]string
	// Offerings are where to create the VMs, in the order to try them
	// (capacity types resolved); empty for a template without offerings,
	// whose parameters are used as they are.
	Offerings []Offering
	// MaxPrice is the template's max price for spot offerings ("" for none).
	MaxPrice string
}

// WatchInstances watches VMs until they settle.
type WatchInstances struct {
	Target    Target
	Instances []InstanceRef
}

// TerminateInstances deletes the VMs of the cluster ClusterID.
type TerminateInstances struct {
	Target    Target
	Instances []InstanceRef
	ClusterID string
}

// ListInventory lists every VM tagged with ClusterID.
type ListInventory struct {
	Target    Target
	ClusterID string
	RequestID string
}

// TagInstances describes, and unless CheckOnly tags, VMs of an explicit
// adoption.
type TagInstances struct {
	RequestID string
	Target    Target
	ClusterID string
	Instances []InstanceRef
	CheckOnly bool
}

func (*CreateInstances) isCommand()    {}
func (*WatchInstances) isCommand()     {}
func (*TerminateInstances) isCommand() {}
func (*ListInventory) isCommand()      {}
func (*TagInstances) isCommand()       {}

// CloudError is a failure as events report it (and the one shape of every
// error a cloud adapter returns about the cloud's answer): the
// provider-neutral kind and the cloud's own code. Code is e.g.
// "ResourceInsufficient.SpecifiedInstanceType", kept for operators and for
// CA's error message.
type CloudError struct {
	Kind    contract.ErrorKind
	Code    string
	Message string
}

func (e *CloudError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("cloud error %s (%s)", e.Code, e.Kind)
	}
	return fmt.Sprintf("cloud error %s (%s): %s", e.Code, e.Kind, e.Message)
}

// Event is one cloud event: *InstancesCreated, *CreateFailed,
// *InstanceObserved, *InstancesTerminated, *TerminateFailed, *Inventory or
// *InstancesTagged.
type Event interface{ isEvent() }

// InstancesCreated says which cloud id each instance of a batch got.
type InstancesCreated struct {
	BatchID   string
	Instances []InstanceRef
	// Offering is the offering the VMs were created on; nil for a create
	// without offerings.
	Offering *Offering
}

// CreateFailed reports instances of a batch that were not created.
type CreateFailed struct {
	BatchID   string
	Instances []InstanceRef
	Error     *CloudError
}

// InstanceObserved reports a watched VM's new state.
type InstanceObserved struct {
	Instance   InstanceRef
	State      State
	PrivateIP  string
	ObservedAt time.Time
	Zone       string
	// LaunchError is, for a LAUNCH_FAILED VM whose cloud says why, that
	// reason (Kind contract.ErrorKindCapacity for a stock-out); nil
	// otherwise.
	LaunchError *CloudError
}

// InstancesTerminated reports VMs terminating or gone.
type InstancesTerminated struct {
	Instances []InstanceRef
}

// TerminateFailed reports VMs that were not terminated.
type TerminateFailed struct {
	Instances []InstanceRef
	Error     *CloudError
}

// InventoryItem is one VM of a cluster's inventory.
type InventoryItem struct {
	CloudID    string
	InstanceID string
	Group      string
	State      State
	// CreatedAt is zero when the cloud did not say.
	CreatedAt time.Time
	PrivateIP string
	BatchID   string
	Zone      string
}

// Inventory answers a ListInventory: the cluster's VMs, or the error.
type Inventory struct {
	RequestID string
	Target    Target
	Items     []InventoryItem
	Error     *CloudError
}

// TagResult is what a TagInstances found of (and did to) one VM.
type TagResult struct {
	Instance  InstanceRef
	State     State
	PrivateIP string
	Zone      string
	Error     *CloudError
}

// InstancesTagged answers a TagInstances: a result per VM, or the error of
// the whole call.
type InstancesTagged struct {
	RequestID string
	Target    Target
	Results   []TagResult
	Error     *CloudError
	CheckOnly bool
}

func (*InstancesCreated) isEvent()    {}
func (*CreateFailed) isEvent()        {}
func (*InstanceObserved) isEvent()    {}
func (*InstancesTerminated) isEvent() {}
func (*TerminateFailed) isEvent()     {}
func (*Inventory) isEvent()           {}
func (*InstancesTagged) isEvent()     {}
