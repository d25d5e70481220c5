package domain

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/libs/contract"
)

// Source says who owns a node group's definition.
type Source string

const (
	// SourceConfig: defined in the configuration file, which wins for
	// everything but the runtime target size.
	SourceConfig Source = "config"
	// SourceAPI: created through the admin API; the file never touches it.
	SourceAPI Source = "api"
)

// NodeGroup is a set of identical VMs that Cluster Autoscaler sizes.
type NodeGroup struct {
	ID      string
	MinSize int
	MaxSize int
	// TargetSize is the desired number of live instances (see Instance.Live).
	TargetSize    int
	Template      InstanceTemplate
	NodeTemplate  NodeTemplate
	Autoscaling   AutoscalingOptions
	Hooks         Hooks
	Parallelism   Parallelism
	AdoptExisting bool
	Source        Source
	UpdatedAt     time.Time
	// Applied are the operations recently applied to the group, by request
	// id, oldest first (see AppliedRequest).
	Applied []AppliedRequest
}

// InstanceTemplate is how to create a VM: the provider's create parameters
// plus where and as whom. Credentials are not here: they stay with the
// cloud adapter, which knows accounts by name.
type InstanceTemplate struct {
	Name     string
	Provider string
	Account  string
	Region   string
	Zone     string
	// ParametersJSON is the provider's create request as a JSON object.
	ParametersJSON     string
	ProviderIDTemplate string
	HourlyPrice        float64
	InstanceType       string
	Arch               string
	OS                 string
	// HookEnv values are sealed tokens (libs/sealed, purpose "hook-env"):
	// the gateway and lifecycle seal them, only the hook runner opens them.
	HookEnv map[string]string
	SSHPort uint32
	// SecretParameters are top-level create parameters kept sealed
	// (parameter name -> token of its JSON value, purpose
	// "template-parameter"): only the cloud adapter opens them, merging
	// them into ParametersJSON for the cloud call.
	SecretParameters map[string]string
	// CapacityType ("spot", "on-demand" or "" for the parameters' choice)
	// and MaxPrice are already written into ParametersJSON; they are kept
	// to show operators and to write spot offerings of an on-demand
	// template (the create command's max price).
	CapacityType string
	MaxPrice     string
	// Offerings are the ordered alternatives of where to create VMs (empty:
	// Zone and InstanceType only; with offerings those are the first
	// offering's). OfferingStrategy orders them for each batch
	// (OrderOfferings).
	Offerings        []cloudspec.Offering
	OfferingStrategy string
}

// Taint is a Kubernetes node taint.
type Taint struct {
	Key    string
	Value  string
	Effect string
}

// NodeTemplate describes the Node a group's VMs become.
type NodeTemplate struct {
	Labels      map[string]string
	Annotations map[string]string
	Taints      []Taint
	Capacity    map[string]string
	Allocatable map[string]string
}

// AutoscalingOptions are per-group overrides of CA's defaults; nil or zero
// means "use CA's default".
type AutoscalingOptions struct {
	ScaleDownUtilizationThreshold    *float64
	ScaleDownGPUUtilizationThreshold *float64
	ScaleDownUnneeded                time.Duration
	ScaleDownUnready                 time.Duration
	MaxNodeProvision                 time.Duration
	ZeroOrMaxNodeScaling             *bool
	IgnoreDaemonSetsUtilization      *bool
}

// OnFailure says what a before_delete hook failure does once retries are spent.
type OnFailure int

const (
	// OnFailureDefault behaves as OnFailureContinue.
	OnFailureDefault OnFailure = iota
	// OnFailureContinue deletes the VM anyway: a broken node must not keep a
	// VM alive forever.
	OnFailureContinue
	// OnFailureBlock keeps the instance in PendingDeletion with the error
	// until an operator retries or force-deletes it.
	OnFailureBlock
)

// HookSpec is a resolved hook; its script travels in the hook command.
type HookSpec struct {
	Name   string
	Script string
	// Timeout of one run; zero means the service default.
	Timeout   time.Duration
	OnFailure OnFailure
	Env       map[string]string
}

// Hooks of a group; nil means "no such hook" and the step is skipped.
type Hooks struct {
	AfterCreated *HookSpec
	BeforeDelete *HookSpec
}

// Parallelism bounds a group's in-flight cloud work; zero means the
// service default.
type Parallelism struct {
	Create int
	Delete int
}

// MaxGroupIDLength, ValidGroupID and ValidName are the shared naming rules
// (libs/contract): the YAML file, the REST API and lifecycle agree.
const MaxGroupIDLength = contract.MaxGroupIDLength

var (
	dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	envName      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// ValidGroupID reports why id cannot name a node group, or "" when it can.
func ValidGroupID(id string) string { return contract.ValidGroupID(id) }

// ValidName reports why s cannot name a template, hook or account, or "".
func ValidName(s string) string { return contract.ValidName(s) }

// FieldError is one problem with one field, addressed by a path relative to
// the validated object (e.g. "minSize", "nodeTemplate.taints[0].effect").
type FieldError struct {
	Field   string
	Problem string
}

func (e FieldError) Error() string {
	if e.Field == "" {
		return e.Problem
	}
	return e.Field + ": " + e.Problem
}

var taintEffects = []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}

// Validate returns every problem with g's definition; the target size is
// checked against the bounds. Field names follow the YAML schema.
func (g NodeGroup) Validate() []FieldError {
	var errs []FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	if p := ValidGroupID(g.ID); p != "" {
		add("id", "%s", p)
	}
	if g.MinSize < 0 {
		add("minSize", "must not be negative, got %d", g.MinSize)
	}
	// maxSize 0 keeps the group empty: Cluster Autoscaler accepts such a
	// group (it never scales it up), and the REST API always did.
	if g.MaxSize < 0 {
		add("maxSize", "must not be negative, got %d", g.MaxSize)
	}
	if g.MinSize > g.MaxSize {
		add("minSize", "must not exceed maxSize (%d), got %d", g.MaxSize, g.MinSize)
	}
	if g.MinSize <= g.MaxSize && (g.TargetSize < g.MinSize || g.TargetSize > g.MaxSize) {
		add("targetSize", "must be within [minSize, maxSize] = [%d, %d], got %d", g.MinSize, g.MaxSize, g.TargetSize)
	}
	if g.Parallelism.Create < 0 {
		add("parallelism.create", "must not be negative, got %d", g.Parallelism.Create)
	}
	if g.Parallelism.Delete < 0 {
		add("parallelism.delete", "must not be negative, got %d", g.Parallelism.Delete)
	}
	for i, t := range g.NodeTemplate.Taints {
		if t.Key == "" {
			add(fmt.Sprintf("nodeTemplate.taints[%d].key", i), "must not be empty")
		}
		if !slices.Contains(taintEffects, t.Effect) {
			add(fmt.Sprintf("nodeTemplate.taints[%d].effect", i), "must be one of %v, got %q", taintEffects, t.Effect)
		}
	}
	for _, h := range []struct {
		field string
		spec  *HookSpec
	}{{"hooks.afterCreated", g.Hooks.AfterCreated}, {"hooks.beforeDelete", g.Hooks.BeforeDelete}} {
		if h.spec == nil {
			continue
		}
		if h.spec.Script == "" {
			add(h.field, "the script is empty")
		}
		if h.spec.Timeout < 0 {
			add(h.field+".timeout", "must not be negative, got %s", h.spec.Timeout)
		}
		for k := range h.spec.Env {
			if !envName.MatchString(k) {
				add(h.field+".env", "%q is not a valid environment variable name", k)
			}
		}
	}
	if g.AdoptExisting && len(g.NodeTemplate.Labels) == 0 {
		add("adoptExisting", "needs at least one nodeTemplate label to recognise the group's Nodes")
	}
	for _, e := range g.Template.Validate() {
		e.Field = "instanceTemplate." + e.Field
		errs = append(errs, e)
	}
	return errs
}

// Validate returns every problem with the template; field names follow the
// YAML schema of instanceTemplates entries ("name" is the entry's key).
func (t InstanceTemplate) Validate() []FieldError {
	var errs []FieldError
	add := func(f, format string, args ...any) {
		errs = append(errs, FieldError{Field: f, Problem: fmt.Sprintf(format, args...)})
	}
	if p := ValidName(t.Name); p != "" {
		add("name", "%s", p)
	}
	if t.Provider == "" {
		add("provider", "must not be empty")
	}
	if p := ValidName(t.Account); p != "" {
		add("account", "%s", p)
	}
	if t.Region == "" {
		add("region", "must not be empty")
	}
	if err := CheckProviderIDTemplate(t.ProviderIDTemplate); err != nil {
		add("providerIDTemplate", "%v", err)
	}
	if t.HourlyPrice < 0 {
		add("hourlyPrice", "must not be negative")
	}
	if t.SSHPort > 65535 {
		add("sshPort", "must be a TCP port, got %d", t.SSHPort)
	}
	for k := range t.HookEnv {
		if !envName.MatchString(k) {
			add("hookEnv", "%q is not a valid environment variable name", k)
		}
	}
	if t.ParametersJSON != "" && !json.Valid([]byte(t.ParametersJSON)) {
		add("parameters", "not valid JSON")
	}
	for k := range t.SecretParameters {
		if k == "" {
			add("secretParameters", "a parameter name must not be empty")
		}
	}
	return errs
}

// CreateParallelism is the group's create parallelism, or def when unset.
func (g NodeGroup) CreateParallelism(def int) int {
	if g.Parallelism.Create > 0 {
		return g.Parallelism.Create
	}
	return def
}

// DeleteParallelism is the group's delete parallelism, or def when unset.
func (g NodeGroup) DeleteParallelism(def int) int {
	if g.Parallelism.Delete > 0 {
		return g.Parallelism.Delete
	}
	return def
}

// ClampTarget returns t within [MinSize, MaxSize].
func (g NodeGroup) ClampTarget(t int) int {
	return max(g.MinSize, min(g.MaxSize, t))
}
