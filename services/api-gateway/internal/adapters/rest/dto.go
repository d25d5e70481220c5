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

// The JSON views of the admin API (declared in libs/restapi, see wire.go)
// built from the records. They are explicit rather than protojson of the
// records because records carry material operators must not read back:
// hook scripts and environments (kubeadm join tokens) and the cloud's
// create parameters (which may hold login passwords).

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
			ScaleDownUnneededTime:            dur(o.GetScaleDownUnneeded()),
			ScaleDownUnreadyTime:             dur(o.GetScaleDownUnready()),
			MaxNodeProvisionTime:             dur(o.GetMaxNodeProvision()),
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
