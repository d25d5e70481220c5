package rest

import (
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// The JSON views of the admin API. They are explicit rather than protojson
// of the records because records carry material operators must not read
// back: hook scripts and environments (kubeadm join tokens) and the cloud's
// create parameters (which may hold login passwords).

// Group is a node group.
type Group struct {
	ID                 string              `json:"id"`
	MinSize            int32               `json:"minSize"`
	MaxSize            int32               `json:"maxSize"`
	TargetSize         int32               `json:"targetSize"`
	Source             string              `json:"source,omitempty"`
	AdoptExisting      bool                `json:"adoptExisting"`
	Revision           uint64              `json:"revision"`
	UpdatedAt          string              `json:"updatedAt,omitempty"`
	InstanceTemplate   *InstanceTemplate   `json:"instanceTemplate,omitempty"`
	NodeTemplate       *NodeTemplate       `json:"nodeTemplate,omitempty"`
	AutoscalingOptions *AutoscalingOptions `json:"autoscalingOptions,omitempty"`
	Hooks              map[string]Hook     `json:"hooks,omitempty"`
	Parallelism        *Parallelism        `json:"parallelism,omitempty"`
	// Instances counts the group's instances per state.
	Instances map[string]int `json:"instances"`
}

// InstanceTemplate is how the group's VMs are created (without the
// provider parameters).
type InstanceTemplate struct {
	Name         string  `json:"name,omitempty"`
	Provider     string  `json:"provider,omitempty"`
	Account      string  `json:"account,omitempty"`
	Region       string  `json:"region,omitempty"`
	Zone         string  `json:"zone,omitempty"`
	InstanceType string  `json:"instanceType,omitempty"`
	Arch         string  `json:"arch,omitempty"`
	OS           string  `json:"os,omitempty"`
	HourlyPrice  float64 `json:"hourlyPrice,omitempty"`
	SSHPort      uint32  `json:"sshPort,omitempty"`
}

// NodeTemplate is the Node the group's VMs become.
type NodeTemplate struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Taints      []Taint           `json:"taints,omitempty"`
	Capacity    map[string]string `json:"capacity,omitempty"`
	Allocatable map[string]string `json:"allocatable,omitempty"`
}

// Taint is a node taint.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// AutoscalingOptions are the group's overrides of CA's defaults; absent
// fields fall back to CA's.
type AutoscalingOptions struct {
	ScaleDownUtilizationThreshold    *float64 `json:"scaleDownUtilizationThreshold,omitempty"`
	ScaleDownGPUUtilizationThreshold *float64 `json:"scaleDownGpuUtilizationThreshold,omitempty"`
	ZeroOrMaxNodeScaling             *bool    `json:"zeroOrMaxNodeScaling,omitempty"`
	IgnoreDaemonSetsUtilization      *bool    `json:"ignoreDaemonSetsUtilization,omitempty"`
	ScaleDownUnneeded                string   `json:"scaleDownUnneeded,omitempty"`
	ScaleDownUnready                 string   `json:"scaleDownUnready,omitempty"`
	MaxNodeProvision                 string   `json:"maxNodeProvision,omitempty"`
}

// Hook describes a configured hook; its script and environment are never
// returned.
type Hook struct {
	Name      string `json:"name,omitempty"`
	Timeout   string `json:"timeout,omitempty"`
	OnFailure string `json:"onFailure,omitempty"`
	HasScript bool   `json:"hasScript"`
}

// Parallelism bounds the group's in-flight cloud work.
type Parallelism struct {
	Create int32 `json:"create"`
	Delete int32 `json:"delete"`
}

// Instance is an instance; History and HookOutputTail only in detail views.
type Instance struct {
	ID         string `json:"id"`
	Group      string `json:"group"`
	State      string `json:"state"`
	ProviderID string `json:"providerID"`
	CloudID    string `json:"cloudID,omitempty"`
	NodeName   string `json:"nodeName,omitempty"`
	PrivateIP  string `json:"privateIP,omitempty"`
	Attempt    uint32 `json:"attempt"`
	Retries    uint32 `json:"retries"`
	BatchID    string `json:"batchID,omitempty"`
	// Adopted: the instance adopts an existing Node (not created by us).
	Adopted        bool       `json:"adopted,omitempty"`
	CreationFailed bool       `json:"creationFailed"`
	Released       bool       `json:"released"`
	InFlight       bool       `json:"inFlight"`
	CreatedAt      string     `json:"createdAt,omitempty"`
	StateSince     string     `json:"stateSince,omitempty"`
	Deadline       string     `json:"deadline,omitempty"`
	NextRetryAt    string     `json:"nextRetryAt,omitempty"`
	LastError      *ErrorInfo `json:"lastError,omitempty"`
	Revision       uint64     `json:"revision"`
	// TraceID is the W3C trace id of the operation that created or
	// released the instance (the trace its commands continue).
	TraceID string `json:"traceID,omitempty"`

	History        []Transition `json:"history,omitempty"`
	HookOutputTail *string      `json:"hookOutputTail,omitempty"`
}

// ErrorInfo is an instance's last error.
type ErrorInfo struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Class     int32  `json:"class"`
	Retryable bool   `json:"retryable"`
	At        string `json:"at,omitempty"`
}

// Transition is one history entry.
type Transition struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Reason string `json:"reason,omitempty"`
	At     string `json:"at,omitempty"`
}

// InstanceList is one page of instances.
type InstanceList struct {
	Items []Instance `json:"items"`
	// Continue is passed as ?continue= for the next page; empty on the last.
	Continue string `json:"continue,omitempty"`
	// Revision is the instances bucket revision the page was read at.
	Revision uint64 `json:"revision"`
}

// GroupList is every node group.
type GroupList struct {
	Items    []Group `json:"items"`
	Revision uint64  `json:"revision"`
}

// StatusView summarises the gateway's view.
type StatusView struct {
	// Role is what the caller's token may do: "read-only" or "admin" (the
	// status page shows its write controls to admins only).
	Role      string            `json:"role"`
	Synced    bool              `json:"synced"`
	Revisions map[string]uint64 `json:"revisions"`
	Groups    []GroupStatus     `json:"groups"`
	// Totals counts instances per state across all groups.
	Totals map[string]int `json:"totals"`
	// Orphans is what lifecycle's orphan reconciler holds back instead of
	// terminating; absent until lifecycle stored its hold.
	Orphans *OrphansView `json:"orphans,omitempty"`
}

// OrphansView is the orphan reconciler's hold: after lifecycle started
// from empty state (a fresh install, or the instances were lost), tagged
// VMs without a record created before the hold started are reported, not
// terminated, until an operator releases them or the hold ends.
type OrphansView struct {
	// Holding: the start-up hold is on.
	Holding bool `json:"holding"`
	// HoldSince and HoldUntil bound the start-up hold.
	HoldSince string `json:"holdSince,omitempty"`
	HoldUntil string `json:"holdUntil,omitempty"`
	// ReleasedAt is the operator's last release.
	ReleasedAt string `json:"releasedAt,omitempty"`
	// Held counts the orphans held back by reason: empty_start (the
	// start-up hold), implausible (too many to be orphans), cap (over the
	// per-pass cap, terminated in later passes).
	Held map[string]int `json:"held,omitempty"`
	// Waiting are the cloud ids held until an operator releases them
	// (oldest first, at most 50).
	Waiting []string `json:"waiting"`
	// Release is the admin call that releases them (terminated from the
	// next reconciler pass on, at most the per-pass cap each pass).
	Release string `json:"release"`
	// UpdatedAt is when lifecycle last wrote the hold.
	UpdatedAt string `json:"updatedAt,omitempty"`
}

// GroupStatus summarises one group.
type GroupStatus struct {
	ID             string         `json:"id"`
	MinSize        int32          `json:"minSize"`
	MaxSize        int32          `json:"maxSize"`
	TargetSize     int32          `json:"targetSize"`
	Instances      map[string]int `json:"instances"`
	CreationFailed int            `json:"creationFailed"`
}

func ts(t *timestamppb.Timestamp) string {
	if t == nil || (t.GetSeconds() == 0 && t.GetNanos() == 0) {
		return ""
	}
	return t.AsTime().UTC().Format(time.RFC3339Nano)
}

func dur(d *durationpb.Duration) string {
	if d == nil {
		return ""
	}
	return d.AsDuration().String()
}

func stateName(s statev1.InstanceState) string { return domain.InstanceState(s).String() }

func countsJSON(c map[domain.InstanceState]int) map[string]int {
	out := make(map[string]int, len(c))
	for s, n := range c {
		out[s.String()] = n
	}
	return out
}

func groupJSON(g app.GroupView, counts map[domain.InstanceState]int) Group {
	r := g.Record
	out := Group{
		ID: r.GetId(), MinSize: r.GetMinSize(), MaxSize: r.GetMaxSize(), TargetSize: r.GetTargetSize(),
		Source: r.GetSource(), AdoptExisting: r.GetAdoptExisting(), Revision: g.Revision,
		UpdatedAt: ts(r.GetUpdatedAt()), Instances: countsJSON(counts),
	}
	if t := r.GetInstanceTemplate(); t != nil {
		it := templateJSON(t)
		out.InstanceTemplate = &it
	}
	if n := r.GetNodeTemplate(); n != nil {
		nt := &NodeTemplate{Labels: n.GetLabels(), Annotations: n.GetAnnotations(), Capacity: n.GetCapacity(), Allocatable: n.GetAllocatable()}
		for _, t := range n.GetTaints() {
			nt.Taints = append(nt.Taints, Taint{Key: t.GetKey(), Value: t.GetValue(), Effect: t.GetEffect()})
		}
		out.NodeTemplate = nt
	}
	if o := r.GetAutoscalingOptions(); o != nil {
		out.AutoscalingOptions = &AutoscalingOptions{
			ScaleDownUtilizationThreshold:    o.ScaleDownUtilizationThreshold,
			ScaleDownGPUUtilizationThreshold: o.ScaleDownGpuUtilizationThreshold,
			ZeroOrMaxNodeScaling:             o.ZeroOrMaxNodeScaling,
			IgnoreDaemonSetsUtilization:      o.IgnoreDaemonsetsUtilization,
			ScaleDownUnneeded:                dur(o.GetScaleDownUnneeded()),
			ScaleDownUnready:                 dur(o.GetScaleDownUnready()),
			MaxNodeProvision:                 dur(o.GetMaxNodeProvision()),
		}
	}
	if h := r.GetHooks(); h != nil {
		out.Hooks = map[string]Hook{}
		for name, spec := range map[string]*statev1.HookSpec{"afterCreated": h.GetAfterCreated(), "beforeDelete": h.GetBeforeDelete()} {
			if spec == nil {
				continue
			}
			out.Hooks[name] = hookJSON(spec)
		}
	}
	if p := r.GetParallelism(); p != nil {
		out.Parallelism = &Parallelism{Create: p.GetCreate(), Delete: p.GetDelete()}
	}
	return out
}

func instanceJSON(v app.InstanceView, detail bool) Instance {
	r := v.Record
	out := Instance{
		ID: r.GetId(), Group: r.GetGroup(), State: stateName(r.GetState()), ProviderID: v.ReportedID,
		CloudID: r.GetCloudId(), NodeName: r.GetNodeName(), PrivateIP: r.GetPrivateIp(),
		Attempt: r.GetAttempt(), Retries: r.GetRetries(), BatchID: r.GetBatchId(),
		// Records written before the adopted field carry batch id "adopted".
		Adopted:        r.GetAdopted() || r.GetBatchId() == "adopted",
		CreationFailed: r.GetCreationFailed(), Released: r.GetReleased(), InFlight: r.GetInFlight(),
		CreatedAt: ts(r.GetCreatedAt()), StateSince: ts(r.GetStateSince()), Deadline: ts(r.GetDeadline()),
		NextRetryAt: ts(r.GetNextRetryAt()), Revision: v.Revision,
		TraceID: traceID(r.GetTraceContext()["traceparent"]),
	}
	if e := r.GetLastError(); e != nil {
		out.LastError = &ErrorInfo{Code: e.GetCode(), Message: e.GetMessage(), Class: e.GetClass(), Retryable: e.GetRetryable(), At: ts(e.GetAt())}
	}
	if detail {
		out.History = make([]Transition, 0, len(r.GetHistory()))
		for _, t := range r.GetHistory() {
			out.History = append(out.History, Transition{From: stateName(t.GetFrom()), To: stateName(t.GetTo()), Reason: t.GetReason(), At: ts(t.GetAt())})
		}
		tail := r.GetHookOutputTail()
		out.HookOutputTail = &tail
	}
	return out
}

// traceID is the trace id of a W3C traceparent
// ("00-<32 hex trace id>-<16 hex span id>-<flags>"), "" if malformed.
func traceID(traceparent string) string {
	parts := strings.Split(traceparent, "-")
	if len(parts) < 4 || len(parts[1]) != 32 || strings.Trim(parts[1], "0123456789abcdef") != "" || strings.Trim(parts[1], "0") == "" {
		return ""
	}
	return parts[1]
}
