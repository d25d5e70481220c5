package domain

import (
	"maps"
	"slices"
	"time"

	"github.com/nodesmith/nodesmith/libs/intern"
)

// The records of lifecycle's KV buckets as the gateway holds them: plain
// structs with what the gateway reads or writes, converted from and to
// their state.v1 messages in the adapters (natskv decodes, natsreq encodes
// writes). Optional parts are pointers (nil: absent); a zero time.Time is
// "not set". The read model shares them between readers: whoever holds
// one from it must not modify it.

// NodeGroup is a node group definition (the groups bucket).
type NodeGroup struct {
	ID                           string
	MinSize, MaxSize, TargetSize int32
	InstanceTemplate             *InstanceTemplate
	NodeTemplate                 *NodeTemplate
	// AutoscalingOptions are the group's overrides of CA's defaults.
	AutoscalingOptions *PartialOptions
	Hooks              *Hooks
	Parallelism        *Parallelism
	AdoptExisting      bool
	// Source is where the definition came from ("api", "file", ...).
	Source    string
	UpdatedAt time.Time
}

// Template returns the group's instance template, nil if it has none (or
// g is nil).
func (g *NodeGroup) Template() *InstanceTemplate {
	if g == nil {
		return nil
	}
	return g.InstanceTemplate
}

// Hook returns the group's afterCreated (beforeDelete: false) or
// beforeDelete hook, nil if it has none.
func (g *NodeGroup) Hook(afterCreated bool) *HookSpec {
	if g == nil || g.Hooks == nil {
		return nil
	}
	if afterCreated {
		return g.Hooks.AfterCreated
	}
	return g.Hooks.BeforeDelete
}

// InstanceTemplate is what a group's VMs are created from, inline in a
// group or named in the catalog. HookEnv and SecretParameters hold sealed
// tokens, never plaintext.
type InstanceTemplate struct {
	Name, Provider, Account, Region, Zone string
	InstanceType, Arch, OS                string
	// ParametersJSON is the cloud's create parameters, compact JSON.
	ParametersJSON     string
	ProviderIDTemplate string
	HourlyPrice        float64
	SSHPort            uint32
	HookEnv            map[string]string
	SecretParameters   map[string]string
	// Offerings are the ordered alternatives of where VMs are created
	// (empty: Zone and InstanceType only); OfferingStrategy orders them
	// per batch ("priority" or "balanced", "" for priority).
	Offerings        []Offering
	OfferingStrategy string
	// CapacityType is "spot" or "on-demand" ("" for on-demand); MaxPrice
	// a spot VM's highest hourly price ("" for none).
	CapacityType, MaxPrice string
}

// NodeTemplate is the Node a group's VM becomes (for CA's scale from zero).
type NodeTemplate struct {
	Labels, Annotations   map[string]string
	Taints                []Taint
	Capacity, Allocatable map[string]string
}

// Taint is a Kubernetes taint.
type Taint struct{ Key, Value, Effect string }

// Hooks are a group's hooks; nil: none.
type Hooks struct{ AfterCreated, BeforeDelete *HookSpec }

// OnFailure is what a failed beforeDelete hook does.
type OnFailure int32

// OnFailure values (numbered as state.v1.OnFailure).
const (
	OnFailureUnspecified OnFailure = iota
	OnFailureContinue
	OnFailureBlock
)

// HookSpec is a hook, inline or named in the catalog (with a name and no
// script: a reference to the catalog's). Env holds sealed tokens.
type HookSpec struct {
	Name, Script string
	// Timeout is zero when not set.
	Timeout   time.Duration
	OnFailure OnFailure
	Env       map[string]string
}

// Parallelism caps a group's concurrent creates and deletes.
type Parallelism struct{ Create, Delete int32 }

// ErrorInfo is the last error recorded on an instance.
type ErrorInfo struct {
	Code, Message string
	Class         int32
	Retryable     bool
	At            time.Time
}

// Transition is one entry of an instance's history.
type Transition struct {
	From, To InstanceState
	Reason   string
	// at is when (zero when not recorded), compact: in each entry of
	// every record (issue 20).
	at intern.Time
}

// NewTransition returns the history entry of a move from -> to at at.
func NewTransition(from, to InstanceState, reason string, at time.Time) Transition {
	return Transition{From: from, To: to, Reason: reason, at: intern.TimeOf(at)}
}

// At returns when the move happened, in UTC (zero when not recorded).
func (t Transition) At() time.Time { return t.at.Time() }

// Same reports whether t and o record the same move.
func (t Transition) Same(o Transition) bool {
	return t.From == o.From && t.To == o.To && t.Reason == o.Reason && t.at == o.at
}

// Instance is one instance record (the instances bucket), with the fields
// the gateway answers with. The read model holds one per instance, so it
// keeps no more than that.
type Instance struct {
	ID, Group string
	State     InstanceState
	Attempt   uint32
	CloudID   string
	// ProviderID is the providerID lifecycle recorded ("" until known).
	ProviderID, NodeName, PrivateIP string
	BatchID                         string
	LastError                       *ErrorInfo
	// The times in 8 bytes each (intern.Time, zero: not set): with
	// time.Time the zone, type and capacity fields below would push the
	// struct to the next size class (issue 20: 100,000 records).
	CreatedAt, StateSince intern.Time
	Deadline, NextRetryAt intern.Time
	History               []Transition
	HookOutputTail        string
	// TraceParent is the W3C traceparent of the instance's trace context.
	TraceParent string
	// Zone, InstanceType and CapacityType say where the VM was created,
	// as lifecycle recorded it (issue 16): empty for instances created
	// before it was recorded and for templates without offerings.
	Zone, InstanceType, CapacityType string
	// The small fields together: interleaved with the others they padded
	// the struct to the next size class (issue 20).
	Retries                     uint32
	CreationFailed              bool
	InFlight, Released, Adopted bool
}

// CloudAccount is a cloud account of the catalog. SealedCredentials is
// sealed and never leaves the gateway in a read answer.
type CloudAccount struct {
	Name, Provider    string
	Regions           []string
	SealedCredentials []byte
	KeyID             string
}

// CatalogEntry is one entry of the catalog bucket: exactly one of
// Template, Account and Hook is set.
type CatalogEntry struct {
	Template  *InstanceTemplate
	Account   *CloudAccount
	Hook      *HookSpec
	Source    string
	UpdatedAt time.Time
}

// Equal reports whether t and o define the same template (both nil: equal).
func (t *InstanceTemplate) Equal(o *InstanceTemplate) bool {
	if t == nil || o == nil {
		return t == o
	}
	return t.Name == o.Name && t.Provider == o.Provider && t.Account == o.Account && t.Region == o.Region &&
		t.Zone == o.Zone && t.InstanceType == o.InstanceType && t.Arch == o.Arch && t.OS == o.OS &&
		t.ParametersJSON == o.ParametersJSON && t.ProviderIDTemplate == o.ProviderIDTemplate &&
		t.HourlyPrice == o.HourlyPrice && t.SSHPort == o.SSHPort &&
		maps.Equal(t.HookEnv, o.HookEnv) && maps.Equal(t.SecretParameters, o.SecretParameters) &&
		slices.Equal(t.Offerings, o.Offerings) && t.OfferingStrategy == o.OfferingStrategy &&
		t.CapacityType == o.CapacityType && t.MaxPrice == o.MaxPrice
}

// Equal reports whether h and o define the same hook (both nil: equal).
func (h *HookSpec) Equal(o *HookSpec) bool {
	if h == nil || o == nil {
		return h == o
	}
	return h.Name == o.Name && h.Script == o.Script && h.Timeout == o.Timeout && h.OnFailure == o.OnFailure &&
		maps.Equal(h.Env, o.Env)
}
