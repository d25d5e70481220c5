package rest

import (
	"cmp"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudspec"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// The JSON views of the admin API (declared in libs/restapi, see wire.go)
// built from the records. They are explicit rather than protojson of the
// records because records carry material operators must not read back:
// hook scripts and environments (kubeadm join tokens) and the cloud's
// create parameters (which may hold login passwords).

func ts(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// dur is a set duration's spelling, "" when not set.
func dur(d *time.Duration) string {
	if d == nil {
		return ""
	}
	return d.String()
}

// timeout is a hook timeout's spelling, "" when not set (zero).
func timeout(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func stateName(s domain.InstanceState) string { return s.String() }

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
		ID: r.ID, MinSize: r.MinSize, MaxSize: r.MaxSize, TargetSize: r.TargetSize,
		Source: r.Source, AdoptExisting: r.AdoptExisting, Revision: g.Revision,
		UpdatedAt: ts(r.UpdatedAt), Instances: countsJSON(counts),
	}
	if t := r.InstanceTemplate; t != nil {
		it := templateJSON(t)
		out.InstanceTemplate = &it
	}
	if n := r.NodeTemplate; n != nil {
		nt := &NodeTemplate{Labels: n.Labels, Annotations: n.Annotations, Capacity: n.Capacity, Allocatable: n.Allocatable}
		for _, t := range n.Taints {
			nt.Taints = append(nt.Taints, Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
		}
		out.NodeTemplate = nt
	}
	if o := r.AutoscalingOptions; o != nil {
		out.AutoscalingOptions = &AutoscalingOptions{
			ScaleDownUtilizationThreshold:    o.ScaleDownUtilizationThreshold,
			ScaleDownGPUUtilizationThreshold: o.ScaleDownGPUUtilizationThreshold,
			ZeroOrMaxNodeScaling:             o.ZeroOrMaxNodeScaling,
			IgnoreDaemonSetsUtilization:      o.IgnoreDaemonSetsUtilization,
			ScaleDownUnneededTime:            dur(o.ScaleDownUnneeded),
			ScaleDownUnreadyTime:             dur(o.ScaleDownUnready),
			MaxNodeProvisionTime:             dur(o.MaxNodeProvision),
		}
	}
	if h := r.Hooks; h != nil {
		out.Hooks = map[string]Hook{}
		for name, spec := range map[string]*domain.HookSpec{"afterCreated": h.AfterCreated, "beforeDelete": h.BeforeDelete} {
			if spec == nil {
				continue
			}
			out.Hooks[name] = hookJSON(spec)
		}
	}
	if p := r.Parallelism; p != nil {
		out.Parallelism = &Parallelism{Create: p.Create, Delete: p.Delete}
	}
	return out
}

func instanceJSON(v app.InstanceView, detail bool) Instance {
	r := v.Record
	out := Instance{
		ID: r.ID, Group: r.Group, State: stateName(r.State), ProviderID: v.ReportedID,
		CloudID: r.CloudID, NodeName: r.NodeName, PrivateIP: r.PrivateIP,
		Attempt: r.Attempt, Retries: r.Retries, BatchID: r.BatchID,
		// Records written before the adopted field carry batch id "adopted".
		Adopted:        r.Adopted || r.BatchID == "adopted",
		CreationFailed: r.CreationFailed, Released: r.Released, InFlight: r.InFlight,
		CreatedAt: ts(r.CreatedAt.Time()), StateSince: ts(r.StateSince.Time()), Deadline: ts(r.Deadline.Time()),
		NextRetryAt: ts(r.NextRetryAt.Time()), Revision: v.Revision,
		TraceID: traceID(r.TraceParent),
		Zone:    r.Zone, InstanceType: r.InstanceType, CapacityType: r.CapacityType,
	}
	if e := r.LastError; e != nil {
		out.LastError = &ErrorInfo{Code: e.Code, Message: e.Message, Class: e.Class, Retryable: e.Retryable, At: ts(e.At)}
	}
	if detail {
		out.History = make([]Transition, 0, len(r.History))
		for _, t := range r.History {
			out.History = append(out.History, transitionOf(t))
		}
		tail := r.HookOutputTail
		out.HookOutputTail = &tail
	}
	return out
}

func transitionOf(t domain.Transition) Transition {
	return Transition{From: stateName(t.From), To: stateName(t.To), Reason: t.Reason, At: ts(t.At())}
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

// group is groupJSON with the template's offerings and their marks.
func (h *handler) group(g app.GroupView, counts map[domain.InstanceState]int) Group {
	out := groupJSON(g, counts)
	out.Offerings = offeringsJSON(g.Record.Template(), h.svc.GroupOfferings(g.Record.Template()))
	return out
}

// offeringsJSON is the view of template t's offerings; nil when it has
// none.
func offeringsJSON(t *domain.InstanceTemplate, offerings []app.OfferingStatus) *GroupOfferings {
	if len(offerings) == 0 {
		return nil
	}
	out := &GroupOfferings{Strategy: cmp.Or(t.OfferingStrategy, cloudspec.StrategyPriority), Items: make([]OfferingStatus, 0, len(offerings))}
	for _, o := range offerings {
		st := OfferingStatus{
			Zone: o.Offering.Zone, SubnetID: o.Offering.SubnetID, InstanceType: o.Offering.InstanceType,
			CapacityType: o.Offering.CapacityType, Available: o.Unavailable == nil,
		}
		if m := o.Unavailable; m != nil {
			st.UnavailableUntil = ts(m.Until)
			st.Reason = &OfferingReason{Code: m.Code, Message: m.Message}
		}
		out.Items = append(out.Items, st)
	}
	return out
}

func unavailableOfferingJSON(v app.OfferingMarkView) UnavailableOffering {
	m := v.Mark
	return UnavailableOffering{
		Provider: m.Ref.Provider, Account: m.Ref.Account, Region: m.Ref.Region, Zone: m.Ref.Zone,
		InstanceType: m.Ref.InstanceType, CapacityType: m.Ref.CapacityType, At: ts(m.At), Until: ts(m.Until),
		Reason: OfferingReason{Code: m.Code, Message: m.Message},
	}
}
