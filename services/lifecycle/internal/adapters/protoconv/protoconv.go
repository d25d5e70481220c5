// Package protoconv maps the domain's groups and instances to and from the
// persisted protobuf shapes (nodesmith.state.v1), in one place for the KV
// store and the ops adapter.
package protoconv

import (
	"maps"
	"slices"
	"time"
	"unique"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func fromTS(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

func dur(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

func fromDur(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.AsDuration()
}

func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

func ptr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// GroupToProto maps a group to its record.
func GroupToProto(g domain.NodeGroup) *statev1.NodeGroup {
	p := &statev1.NodeGroup{
		Id:         g.ID,
		MinSize:    int32(g.MinSize),
		MaxSize:    int32(g.MaxSize),
		TargetSize: int32(g.TargetSize),
		InstanceTemplate: &statev1.InstanceTemplate{
			Name:               g.Template.Name,
			Provider:           g.Template.Provider,
			Account:            g.Template.Account,
			Region:             g.Template.Region,
			ParametersJson:     g.Template.ParametersJSON,
			ProviderIdTemplate: g.Template.ProviderIDTemplate,
			HourlyPrice:        g.Template.HourlyPrice,
			InstanceType:       g.Template.InstanceType,
			Zone:               g.Template.Zone,
			Arch:               g.Template.Arch,
			Os:                 g.Template.OS,
			HookEnv:            cloneMap(g.Template.HookEnv),
			SecretParameters:   cloneMap(g.Template.SecretParameters),
			SshPort:            g.Template.SSHPort,
			Offerings:          offeringsToProto(g.Template.Offerings),
			OfferingStrategy:   g.Template.OfferingStrategy,
			CapacityType:       g.Template.CapacityType,
			MaxPrice:           g.Template.MaxPrice,
		},
		NodeTemplate: &statev1.NodeTemplate{
			Labels:      cloneMap(g.NodeTemplate.Labels),
			Annotations: cloneMap(g.NodeTemplate.Annotations),
			Capacity:    cloneMap(g.NodeTemplate.Capacity),
			Allocatable: cloneMap(g.NodeTemplate.Allocatable),
		},
		AutoscalingOptions: &statev1.AutoscalingOptions{
			ScaleDownUtilizationThreshold:    ptr(g.Autoscaling.ScaleDownUtilizationThreshold),
			ScaleDownGpuUtilizationThreshold: ptr(g.Autoscaling.ScaleDownGPUUtilizationThreshold),
			ScaleDownUnneeded:                dur(g.Autoscaling.ScaleDownUnneeded),
			ScaleDownUnready:                 dur(g.Autoscaling.ScaleDownUnready),
			MaxNodeProvision:                 dur(g.Autoscaling.MaxNodeProvision),
			ZeroOrMaxNodeScaling:             ptr(g.Autoscaling.ZeroOrMaxNodeScaling),
			IgnoreDaemonsetsUtilization:      ptr(g.Autoscaling.IgnoreDaemonSetsUtilization),
		},
		Hooks: &statev1.Hooks{
			AfterCreated: hookToProto(g.Hooks.AfterCreated),
			BeforeDelete: hookToProto(g.Hooks.BeforeDelete),
		},
		Parallelism: &statev1.Parallelism{
			Create: int32(g.Parallelism.Create),
			Delete: int32(g.Parallelism.Delete),
		},
		AdoptExisting: g.AdoptExisting,
		Source:        string(g.Source),
		UpdatedAt:     ts(g.UpdatedAt),
	}
	for _, t := range g.NodeTemplate.Taints {
		p.NodeTemplate.Taints = append(p.NodeTemplate.Taints, &statev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	for _, r := range g.Applied {
		p.AppliedRequests = append(p.AppliedRequests, &statev1.AppliedRequest{
			Id: r.ID, Fingerprint: r.Fingerprint, At: ts(r.At), Release: slices.Clone(r.Release), Force: r.Force,
		})
	}
	return p
}

func hookToProto(h *domain.HookSpec) *statev1.HookSpec {
	if h == nil {
		return nil
	}
	return &statev1.HookSpec{
		Name:      h.Name,
		Script:    h.Script,
		Timeout:   dur(h.Timeout),
		OnFailure: statev1.OnFailure(h.OnFailure),
		Env:       cloneMap(h.Env),
	}
}

func hookFromProto(h *statev1.HookSpec) *domain.HookSpec {
	if h == nil {
		return nil
	}
	return &domain.HookSpec{
		Name:      h.GetName(),
		Script:    h.GetScript(),
		Timeout:   fromDur(h.GetTimeout()),
		OnFailure: domain.OnFailure(h.GetOnFailure()),
		Env:       cloneMap(h.GetEnv()),
	}
}

// GroupFromProto maps a record to a group.
func GroupFromProto(p *statev1.NodeGroup) domain.NodeGroup {
	t := p.GetInstanceTemplate()
	nt := p.GetNodeTemplate()
	ao := p.GetAutoscalingOptions()
	g := domain.NodeGroup{
		ID:         p.GetId(),
		MinSize:    int(p.GetMinSize()),
		MaxSize:    int(p.GetMaxSize()),
		TargetSize: int(p.GetTargetSize()),
		Template: domain.InstanceTemplate{
			Name:               t.GetName(),
			Provider:           t.GetProvider(),
			Account:            t.GetAccount(),
			Region:             t.GetRegion(),
			Zone:               t.GetZone(),
			ParametersJSON:     t.GetParametersJson(),
			ProviderIDTemplate: t.GetProviderIdTemplate(),
			HourlyPrice:        t.GetHourlyPrice(),
			InstanceType:       t.GetInstanceType(),
			Arch:               t.GetArch(),
			OS:                 t.GetOs(),
			HookEnv:            cloneMap(t.GetHookEnv()),
			SecretParameters:   cloneMap(t.GetSecretParameters()),
			SSHPort:            t.GetSshPort(),
			Offerings:          offeringsFromProto(t.GetOfferings()),
			OfferingStrategy:   t.GetOfferingStrategy(),
			CapacityType:       t.GetCapacityType(),
			MaxPrice:           t.GetMaxPrice(),
		},
		NodeTemplate: domain.NodeTemplate{
			Labels:      cloneMap(nt.GetLabels()),
			Annotations: cloneMap(nt.GetAnnotations()),
			Capacity:    cloneMap(nt.GetCapacity()),
			Allocatable: cloneMap(nt.GetAllocatable()),
		},
		Autoscaling: domain.AutoscalingOptions{
			ScaleDownUnneeded: fromDur(ao.GetScaleDownUnneeded()),
			ScaleDownUnready:  fromDur(ao.GetScaleDownUnready()),
			MaxNodeProvision:  fromDur(ao.GetMaxNodeProvision()),
		},
		Hooks: domain.Hooks{
			AfterCreated: hookFromProto(p.GetHooks().GetAfterCreated()),
			BeforeDelete: hookFromProto(p.GetHooks().GetBeforeDelete()),
		},
		Parallelism: domain.Parallelism{
			Create: int(p.GetParallelism().GetCreate()),
			Delete: int(p.GetParallelism().GetDelete()),
		},
		AdoptExisting: p.GetAdoptExisting(),
		Source:        domain.Source(p.GetSource()),
		UpdatedAt:     fromTS(p.GetUpdatedAt()),
	}
	if ao != nil {
		g.Autoscaling.ScaleDownUtilizationThreshold = ptr(ao.ScaleDownUtilizationThreshold)
		g.Autoscaling.ScaleDownGPUUtilizationThreshold = ptr(ao.ScaleDownGpuUtilizationThreshold)
		g.Autoscaling.ZeroOrMaxNodeScaling = ptr(ao.ZeroOrMaxNodeScaling)
		g.Autoscaling.IgnoreDaemonSetsUtilization = ptr(ao.IgnoreDaemonsetsUtilization)
	}
	for _, t := range nt.GetTaints() {
		g.NodeTemplate.Taints = append(g.NodeTemplate.Taints, domain.Taint{Key: t.GetKey(), Value: t.GetValue(), Effect: t.GetEffect()})
	}
	for _, r := range p.GetAppliedRequests() {
		g.Applied = append(g.Applied, domain.AppliedRequest{
			ID: r.GetId(), Fingerprint: r.GetFingerprint(), At: fromTS(r.GetAt()), Release: slices.Clone(r.GetRelease()), Force: r.GetForce(),
		})
	}
	return g
}

// InstanceToProto maps an instance to its record.
func InstanceToProto(i domain.Instance) *statev1.Instance {
	p := &statev1.Instance{
		Id:             i.ID,
		Group:          i.Group,
		State:          statev1.InstanceState(i.State),
		Attempt:        i.Attempt,
		CloudId:        i.CloudID,
		ProviderId:     i.ProviderID,
		NodeName:       i.NodeName,
		PrivateIp:      i.PrivateIP,
		ClientToken:    i.ClientToken,
		BatchId:        i.BatchID,
		CreationFailed: i.CreationFailed,
		CreatedAt:      ts(i.CreatedAt),
		StateSince:     ts(i.StateSince),
		Deadline:       ts(i.Deadline),
		NextRetryAt:    ts(i.NextRetryAt),
		Retries:        i.Retries,
		SshHostKey:     i.SSHHostKey,
		HookOutputTail: i.HookOutputTail,
		InFlight:       i.InFlight,
		Released:       i.Released,
		TraceContext:   i.TraceContext,
		Adopted:        i.Adopted,
		Zone:           i.Zone,
		InstanceType:   i.InstanceType,
		CapacityType:   i.CapacityType,
	}
	if e := i.LastError; e != nil {
		p.LastError = &statev1.ErrorInfo{Code: e.Code, Message: e.Message, Class: e.Class, Retryable: e.Retryable, At: ts(e.At)}
	}
	for _, t := range i.History {
		p.History = append(p.History, &statev1.Transition{
			From: statev1.InstanceState(t.From), To: statev1.InstanceState(t.To), Reason: t.Reason, At: ts(t.At),
		})
	}
	return p
}

// OfferingToProto maps an offering.
func OfferingToProto(o cloudspec.Offering) *cloudv1.Offering {
	return &cloudv1.Offering{Zone: o.Zone, SubnetId: o.SubnetID, InstanceType: o.InstanceType, CapacityType: o.CapacityType}
}

// OfferingFromProto maps an offering.
func OfferingFromProto(p *cloudv1.Offering) cloudspec.Offering {
	return cloudspec.Offering{Zone: p.GetZone(), SubnetID: p.GetSubnetId(), InstanceType: p.GetInstanceType(), CapacityType: p.GetCapacityType()}
}

func offeringsToProto(os []cloudspec.Offering) []*cloudv1.Offering {
	if len(os) == 0 {
		return nil
	}
	out := make([]*cloudv1.Offering, len(os))
	for i, o := range os {
		out[i] = OfferingToProto(o)
	}
	return out
}

func offeringsFromProto(ps []*cloudv1.Offering) []cloudspec.Offering {
	if len(ps) == 0 {
		return nil
	}
	out := make([]cloudspec.Offering, len(ps))
	for i, p := range ps {
		out[i] = OfferingFromProto(p)
	}
	return out
}

// legacyAdoptedBatch is the batch id that marked an adopted instance
// before state.v1.Instance.adopted existed.
const legacyAdoptedBatch = "adopted"

// InstanceFromProto maps a record to an instance. Lifecycle caches every
// instance it decodes, so the strings many instances repeat are shared
// rather than each holding its own copy: the group and the history's
// reasons are interned, and a node name equal to the id (the usual case)
// is the id's string.
func InstanceFromProto(p *statev1.Instance) domain.Instance {
	i := domain.Instance{
		ID:             p.GetId(),
		Group:          intern(p.GetGroup()),
		State:          domain.State(p.GetState()),
		Attempt:        p.GetAttempt(),
		CloudID:        p.GetCloudId(),
		ProviderID:     p.GetProviderId(),
		NodeName:       p.GetNodeName(),
		PrivateIP:      p.GetPrivateIp(),
		ClientToken:    p.GetClientToken(),
		BatchID:        p.GetBatchId(),
		CreationFailed: p.GetCreationFailed(),
		CreatedAt:      fromTS(p.GetCreatedAt()),
		StateSince:     fromTS(p.GetStateSince()),
		Deadline:       fromTS(p.GetDeadline()),
		NextRetryAt:    fromTS(p.GetNextRetryAt()),
		Retries:        p.GetRetries(),
		SSHHostKey:     p.GetSshHostKey(),
		HookOutputTail: p.GetHookOutputTail(),
		InFlight:       p.GetInFlight(),
		Released:       p.GetReleased(),
		TraceContext:   p.GetTraceContext(),
		// Records written before the adopted field marked adoption with
		// a batch id.
		Adopted: p.GetAdopted() || p.GetBatchId() == legacyAdoptedBatch,
		// Where the VM landed: a few values shared by many instances.
		Zone:         intern(p.GetZone()),
		InstanceType: intern(p.GetInstanceType()),
		CapacityType: intern(p.GetCapacityType()),
	}
	if i.NodeName == i.ID {
		i.NodeName = i.ID
	}
	if e := p.GetLastError(); e != nil {
		i.LastError = &domain.ErrorInfo{Code: e.GetCode(), Message: e.GetMessage(), Class: e.GetClass(), Retryable: e.GetRetryable(), At: fromTS(e.GetAt())}
	}
	if h := p.GetHistory(); len(h) > 0 {
		// Sized once: appending grows the backing array to the next power
		// of two, 8 transitions for a usual 5-step history (~170 bytes per
		// cached instance never used).
		i.History = make([]domain.Transition, 0, len(h))
	}
	for _, t := range p.GetHistory() {
		i.History = append(i.History, domain.Transition{
			From: domain.State(t.GetFrom()), To: domain.State(t.GetTo()), Reason: intern(t.GetReason()), At: fromTS(t.GetAt()),
		})
	}
	return i
}

// intern returns the canonical copy of s (unique keeps it only while some
// value refers to it).
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}
