// Package stateconv converts lifecycle's KV records (nodesmith.state.v1)
// to and from the gateway's domain types: the natskv watcher decodes
// records with it, natsreq encodes the groups and catalog entries the
// gateway writes. It is the one place both shapes meet; app, ports and
// domain never see a state.v1 message.
package stateconv

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nodesmith/nodesmith/libs/intern"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// timeOf is t as a time, zero when unset (nil or the epoch's zero value).
func timeOf(t *timestamppb.Timestamp) time.Time {
	if t == nil || (t.GetSeconds() == 0 && t.GetNanos() == 0) {
		return time.Time{}
	}
	return t.AsTime()
}

// timestampOf is t as a Timestamp, nil when t is zero.
func timestampOf(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func durationPtr(d *durationpb.Duration) *time.Duration {
	if d == nil {
		return nil
	}
	v := d.AsDuration()
	return &v
}

func durationpbOf(d *time.Duration) *durationpb.Duration {
	if d == nil {
		return nil
	}
	return durationpb.New(*d)
}

// Group converts a group record; nil stays nil.
func Group(p *statev1.NodeGroup) *domain.NodeGroup {
	if p == nil {
		return nil
	}
	g := &domain.NodeGroup{
		ID: p.GetId(), MinSize: p.GetMinSize(), MaxSize: p.GetMaxSize(), TargetSize: p.GetTargetSize(),
		InstanceTemplate: Template(p.GetInstanceTemplate()),
		AdoptExisting:    p.GetAdoptExisting(), Source: p.GetSource(), UpdatedAt: timeOf(p.GetUpdatedAt()),
	}
	if n := p.GetNodeTemplate(); n != nil {
		nt := &domain.NodeTemplate{Labels: n.GetLabels(), Annotations: n.GetAnnotations(), Capacity: n.GetCapacity(), Allocatable: n.GetAllocatable()}
		if len(n.GetTaints()) > 0 {
			nt.Taints = make([]domain.Taint, 0, len(n.GetTaints()))
			for _, t := range n.GetTaints() {
				nt.Taints = append(nt.Taints, domain.Taint{Key: t.GetKey(), Value: t.GetValue(), Effect: t.GetEffect()})
			}
		}
		g.NodeTemplate = nt
	}
	if o := p.GetAutoscalingOptions(); o != nil {
		g.AutoscalingOptions = &domain.PartialOptions{
			ScaleDownUtilizationThreshold:    o.ScaleDownUtilizationThreshold,
			ScaleDownGPUUtilizationThreshold: o.ScaleDownGpuUtilizationThreshold,
			ZeroOrMaxNodeScaling:             o.ZeroOrMaxNodeScaling,
			IgnoreDaemonSetsUtilization:      o.IgnoreDaemonsetsUtilization,
			ScaleDownUnneeded:                durationPtr(o.GetScaleDownUnneeded()),
			ScaleDownUnready:                 durationPtr(o.GetScaleDownUnready()),
			MaxNodeProvision:                 durationPtr(o.GetMaxNodeProvision()),
		}
	}
	if h := p.GetHooks(); h != nil {
		g.Hooks = &domain.Hooks{AfterCreated: Hook(h.GetAfterCreated()), BeforeDelete: Hook(h.GetBeforeDelete())}
	}
	if x := p.GetParallelism(); x != nil {
		g.Parallelism = &domain.Parallelism{Create: x.GetCreate(), Delete: x.GetDelete()}
	}
	return g
}

// GroupRecord converts a group to its record; nil stays nil.
func GroupRecord(g *domain.NodeGroup) *statev1.NodeGroup {
	if g == nil {
		return nil
	}
	p := &statev1.NodeGroup{
		Id: g.ID, MinSize: g.MinSize, MaxSize: g.MaxSize, TargetSize: g.TargetSize,
		InstanceTemplate: TemplateRecord(g.InstanceTemplate),
		AdoptExisting:    g.AdoptExisting, Source: g.Source, UpdatedAt: timestampOf(g.UpdatedAt),
	}
	if n := g.NodeTemplate; n != nil {
		nt := &statev1.NodeTemplate{Labels: n.Labels, Annotations: n.Annotations, Capacity: n.Capacity, Allocatable: n.Allocatable}
		for _, t := range n.Taints {
			nt.Taints = append(nt.Taints, &statev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
		}
		p.NodeTemplate = nt
	}
	if o := g.AutoscalingOptions; o != nil {
		p.AutoscalingOptions = &statev1.AutoscalingOptions{
			ScaleDownUtilizationThreshold:    o.ScaleDownUtilizationThreshold,
			ScaleDownGpuUtilizationThreshold: o.ScaleDownGPUUtilizationThreshold,
			ZeroOrMaxNodeScaling:             o.ZeroOrMaxNodeScaling,
			IgnoreDaemonsetsUtilization:      o.IgnoreDaemonSetsUtilization,
			ScaleDownUnneeded:                durationpbOf(o.ScaleDownUnneeded),
			ScaleDownUnready:                 durationpbOf(o.ScaleDownUnready),
			MaxNodeProvision:                 durationpbOf(o.MaxNodeProvision),
		}
	}
	if h := g.Hooks; h != nil {
		p.Hooks = &statev1.Hooks{AfterCreated: HookRecord(h.AfterCreated), BeforeDelete: HookRecord(h.BeforeDelete)}
	}
	if x := g.Parallelism; x != nil {
		p.Parallelism = &statev1.Parallelism{Create: x.Create, Delete: x.Delete}
	}
	return p
}

// Template converts an instance template; nil stays nil.
func Template(p *statev1.InstanceTemplate) *domain.InstanceTemplate {
	if p == nil {
		return nil
	}
	return &domain.InstanceTemplate{
		Name: p.GetName(), Provider: p.GetProvider(), Account: p.GetAccount(), Region: p.GetRegion(), Zone: p.GetZone(),
		InstanceType: p.GetInstanceType(), Arch: p.GetArch(), OS: p.GetOs(),
		ParametersJSON: p.GetParametersJson(), ProviderIDTemplate: p.GetProviderIdTemplate(),
		HourlyPrice: p.GetHourlyPrice(), SSHPort: p.GetSshPort(),
		HookEnv: p.GetHookEnv(), SecretParameters: p.GetSecretParameters(),
		Offerings: offerings(p.GetOfferings()), OfferingStrategy: p.GetOfferingStrategy(),
		CapacityType: p.GetCapacityType(), MaxPrice: p.GetMaxPrice(),
	}
}

func offerings(ps []*cloudv1.Offering) []domain.Offering {
	if len(ps) == 0 {
		return nil
	}
	out := make([]domain.Offering, 0, len(ps))
	for _, o := range ps {
		out = append(out, domain.Offering{Zone: o.GetZone(), SubnetID: o.GetSubnetId(), InstanceType: o.GetInstanceType(), CapacityType: o.GetCapacityType()})
	}
	return out
}

func offeringRecords(os []domain.Offering) []*cloudv1.Offering {
	if len(os) == 0 {
		return nil
	}
	out := make([]*cloudv1.Offering, 0, len(os))
	for _, o := range os {
		out = append(out, &cloudv1.Offering{Zone: o.Zone, SubnetId: o.SubnetID, InstanceType: o.InstanceType, CapacityType: o.CapacityType})
	}
	return out
}

// OfferingMark converts a value of the offerings bucket; nil stays nil.
func OfferingMark(p *cloudv1.OfferingUnavailable) *domain.OfferingMark {
	if p == nil {
		return nil
	}
	return &domain.OfferingMark{
		Ref: domain.OfferingRef{
			Provider: p.GetTarget().GetProvider(), Account: p.GetTarget().GetAccount(), Region: p.GetTarget().GetRegion(),
			Zone: p.GetOffering().GetZone(), InstanceType: p.GetOffering().GetInstanceType(), CapacityType: p.GetOffering().GetCapacityType(),
		},
		At: timeOf(p.GetAt()), Until: timeOf(p.GetUntil()),
		Code: p.GetReason().GetCode(), Message: p.GetReason().GetMessage(),
	}
}

// TemplateRecord converts an instance template to its record; nil stays nil.
func TemplateRecord(t *domain.InstanceTemplate) *statev1.InstanceTemplate {
	if t == nil {
		return nil
	}
	return &statev1.InstanceTemplate{
		Name: t.Name, Provider: t.Provider, Account: t.Account, Region: t.Region, Zone: t.Zone,
		InstanceType: t.InstanceType, Arch: t.Arch, Os: t.OS,
		ParametersJson: t.ParametersJSON, ProviderIdTemplate: t.ProviderIDTemplate,
		HourlyPrice: t.HourlyPrice, SshPort: t.SSHPort,
		HookEnv: t.HookEnv, SecretParameters: t.SecretParameters,
		Offerings: offeringRecords(t.Offerings), OfferingStrategy: t.OfferingStrategy,
		CapacityType: t.CapacityType, MaxPrice: t.MaxPrice,
	}
}

// Hook converts a hook; nil stays nil.
func Hook(p *statev1.HookSpec) *domain.HookSpec {
	if p == nil {
		return nil
	}
	h := &domain.HookSpec{Name: p.GetName(), Script: p.GetScript(), OnFailure: domain.OnFailure(p.GetOnFailure()), Env: p.GetEnv()}
	if p.GetTimeout() != nil {
		h.Timeout = p.GetTimeout().AsDuration()
	}
	return h
}

// HookRecord converts a hook to its record; nil stays nil.
func HookRecord(h *domain.HookSpec) *statev1.HookSpec {
	if h == nil {
		return nil
	}
	p := &statev1.HookSpec{Name: h.Name, Script: h.Script, OnFailure: statev1.OnFailure(h.OnFailure), Env: h.Env}
	if h.Timeout != 0 {
		p.Timeout = durationpb.New(h.Timeout)
	}
	return p
}

// Instance converts an instance record; nil stays nil.
func Instance(p *statev1.Instance) *domain.Instance {
	if p == nil {
		return nil
	}
	in := &domain.Instance{
		ID: p.GetId(), Group: intern.String(p.GetGroup()), State: domain.InstanceState(p.GetState()),
		Attempt: p.GetAttempt(), Retries: p.GetRetries(), CloudID: p.GetCloudId(),
		ProviderID: p.GetProviderId(), NodeName: p.GetNodeName(), PrivateIP: p.GetPrivateIp(), BatchID: p.GetBatchId(),
		CreationFailed: p.GetCreationFailed(), InFlight: p.GetInFlight(), Released: p.GetReleased(), Adopted: p.GetAdopted(),
		CreatedAt: intern.TimeOf(timeOf(p.GetCreatedAt())), StateSince: intern.TimeOf(timeOf(p.GetStateSince())),
		Deadline: intern.TimeOf(timeOf(p.GetDeadline())), NextRetryAt: intern.TimeOf(timeOf(p.GetNextRetryAt())),
		HookOutputTail: p.GetHookOutputTail(), TraceParent: p.GetTraceContext()["traceparent"],
		// Few values, repeated across the records of a group: shared.
		Zone: intern.String(p.GetZone()), InstanceType: intern.String(p.GetInstanceType()), CapacityType: intern.String(p.GetCapacityType()),
	}
	// The read model holds every record (issue 20: 100,000 of them):
	// the strings the record owns go into one allocation (a node name
	// equal to the id or the IP shares it), those repeated across records
	// (group, history reasons, error codes) are shared.
	intern.Pack(&in.ID, &in.CloudID, &in.ProviderID, &in.NodeName, &in.PrivateIP, &in.BatchID, &in.HookOutputTail, &in.TraceParent)
	if e := p.GetLastError(); e != nil {
		in.LastError = &domain.ErrorInfo{Code: intern.String(e.GetCode()), Message: e.GetMessage(), Class: e.GetClass(), Retryable: e.GetRetryable(), At: timeOf(e.GetAt())}
	}
	if h := p.GetHistory(); len(h) > 0 {
		in.History = make([]domain.Transition, len(h))
		for i, t := range h {
			in.History[i] = domain.NewTransition(domain.InstanceState(t.GetFrom()), domain.InstanceState(t.GetTo()), intern.String(t.GetReason()), timeOf(t.GetAt()))
		}
	}
	return in
}

// InstanceRecord converts an instance to its record (the fields the domain
// type keeps); nil stays nil. Test doubles write records with it.
func InstanceRecord(in *domain.Instance) *statev1.Instance {
	if in == nil {
		return nil
	}
	p := &statev1.Instance{
		Id: in.ID, Group: in.Group, State: statev1.InstanceState(in.State),
		Attempt: in.Attempt, Retries: in.Retries, CloudId: in.CloudID,
		ProviderId: in.ProviderID, NodeName: in.NodeName, PrivateIp: in.PrivateIP, BatchId: in.BatchID,
		CreationFailed: in.CreationFailed, InFlight: in.InFlight, Released: in.Released, Adopted: in.Adopted,
		CreatedAt: timestampOf(in.CreatedAt.Time()), StateSince: timestampOf(in.StateSince.Time()),
		Deadline: timestampOf(in.Deadline.Time()), NextRetryAt: timestampOf(in.NextRetryAt.Time()),
		HookOutputTail: in.HookOutputTail,
		Zone:           in.Zone, InstanceType: in.InstanceType, CapacityType: in.CapacityType,
	}
	if in.TraceParent != "" {
		p.TraceContext = map[string]string{"traceparent": in.TraceParent}
	}
	if e := in.LastError; e != nil {
		p.LastError = &statev1.ErrorInfo{Code: e.Code, Message: e.Message, Class: e.Class, Retryable: e.Retryable, At: timestampOf(e.At)}
	}
	for _, t := range in.History {
		p.History = append(p.History, &statev1.Transition{From: statev1.InstanceState(t.From), To: statev1.InstanceState(t.To), Reason: t.Reason, At: timestampOf(t.At())})
	}
	return p
}

// CatalogEntry converts a catalog record; nil stays nil.
func CatalogEntry(p *statev1.CatalogEntry) *domain.CatalogEntry {
	if p == nil {
		return nil
	}
	e := &domain.CatalogEntry{Template: Template(p.GetTemplate()), Hook: Hook(p.GetHook()), Source: p.GetSource(), UpdatedAt: timeOf(p.GetUpdatedAt())}
	if a := p.GetAccount(); a != nil {
		e.Account = &domain.CloudAccount{Name: a.GetName(), Provider: a.GetProvider(), Regions: a.GetRegions(), SealedCredentials: a.GetSealedCredentials(), KeyID: a.GetKeyId()}
	}
	return e
}

// CatalogEntryRecord converts a catalog entry to its record; nil stays nil.
func CatalogEntryRecord(e *domain.CatalogEntry) *statev1.CatalogEntry {
	if e == nil {
		return nil
	}
	p := &statev1.CatalogEntry{Source: e.Source, UpdatedAt: timestampOf(e.UpdatedAt)}
	switch {
	case e.Template != nil:
		p.Entry = &statev1.CatalogEntry_Template{Template: TemplateRecord(e.Template)}
	case e.Account != nil:
		a := e.Account
		p.Entry = &statev1.CatalogEntry_Account{Account: &statev1.CloudAccount{Name: a.Name, Provider: a.Provider, Regions: a.Regions, SealedCredentials: a.SealedCredentials, KeyId: a.KeyID}}
	case e.Hook != nil:
		p.Entry = &statev1.CatalogEntry_Hook{Hook: HookRecord(e.Hook)}
	}
	return p
}
