package stateconv_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/stateconv"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// The domain mirrors the record's state numbers; a renumbering in the
// proto must fail here, not silently in production.
func TestDomainStatesMatchRecordStates(t *testing.T) {
	for n, name := range statev1.InstanceState_name {
		if got := "INSTANCE_STATE_" + domain.InstanceState(n).String(); got != name {
			t.Errorf("state %d: domain says %s, proto says %s", n, got, name)
		}
	}
	if len(statev1.InstanceState_name) != len(domain.InstanceStates())+1 {
		t.Errorf("proto has %d states, domain %d (+unspecified)", len(statev1.InstanceState_name), len(domain.InstanceStates()))
	}
	for n, name := range map[domain.OnFailure]string{
		domain.OnFailureUnspecified: "ON_FAILURE_UNSPECIFIED", domain.OnFailureContinue: "ON_FAILURE_CONTINUE", domain.OnFailureBlock: "ON_FAILURE_BLOCK",
	} {
		if got := statev1.OnFailure(n).String(); got != name {
			t.Errorf("on failure %d: proto says %s, domain means %s", n, got, name)
		}
	}
	if len(statev1.OnFailure_name) != 3 {
		t.Errorf("proto has %d OnFailure values, the domain 3", len(statev1.OnFailure_name))
	}
}

func fullGroup() *statev1.NodeGroup {
	hook := &statev1.HookSpec{Name: "join", Script: "kubeadm join", Timeout: durationpb.New(time.Minute), OnFailure: statev1.OnFailure_ON_FAILURE_BLOCK, Env: map[string]string{"T": "sealed:x"}}
	return &statev1.NodeGroup{
		Id: "web", MinSize: 1, MaxSize: 10, TargetSize: 3,
		InstanceTemplate: &statev1.InstanceTemplate{
			Name: "small", Provider: "tencentcloud", Account: "prod", Region: "ap-guangzhou", ParametersJson: `{"a":1}`,
			ProviderIdTemplate: "tencentcloud:///{{.Zone}}/{{.CloudID}}", HourlyPrice: 0.4, InstanceType: "S5.MEDIUM4", Zone: "ap-guangzhou-3",
			Arch: "arm64", Os: "linux", HookEnv: map[string]string{"E": "sealed:e"}, SshPort: 2222, SecretParameters: map[string]string{"P": "sealed:p"},
			Offerings: []*cloudv1.Offering{
				{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4"},
				{Zone: "ap-guangzhou-4", SubnetId: "subnet-4", InstanceType: "S5.MEDIUM4", CapacityType: "spot"},
			},
			OfferingStrategy: "balanced", CapacityType: "on-demand", MaxPrice: "0.2",
		},
		NodeTemplate: &statev1.NodeTemplate{
			Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "2"},
			Taints:   []*statev1.Taint{{Key: "gpu", Value: "yes", Effect: "NoSchedule"}},
			Capacity: map[string]string{"cpu": "2"}, Allocatable: map[string]string{"cpu": "1900m"},
		},
		AutoscalingOptions: &statev1.AutoscalingOptions{
			ScaleDownUtilizationThreshold: proto.Float64(0.5), ScaleDownGpuUtilizationThreshold: proto.Float64(0.6),
			ScaleDownUnneeded: durationpb.New(time.Minute), ScaleDownUnready: durationpb.New(0), MaxNodeProvision: durationpb.New(time.Hour),
			ZeroOrMaxNodeScaling: proto.Bool(false), IgnoreDaemonsetsUtilization: proto.Bool(true),
		},
		Hooks:         &statev1.Hooks{AfterCreated: hook, BeforeDelete: &statev1.HookSpec{Name: "drain"}},
		Parallelism:   &statev1.Parallelism{Create: 5, Delete: 2},
		AdoptExisting: true, Source: "api", UpdatedAt: timestamppb.New(time.Unix(1_780_000_000, 5)),
	}
}

// What the gateway writes reaches lifecycle whole: every field of a group
// and of each kind of catalog entry survives record -> domain -> record
// (applied_requests excepted: lifecycle's own bookkeeping, never written
// by the gateway).
func TestRecordsSurviveTheDomain(t *testing.T) {
	g := fullGroup()
	if got := stateconv.GroupRecord(stateconv.Group(g)); !proto.Equal(got, g) {
		t.Errorf("group:\n got %v\nwant %v", got, g)
	}
	for _, e := range []*statev1.CatalogEntry{
		{Entry: &statev1.CatalogEntry_Template{Template: g.GetInstanceTemplate()}, Source: "config", UpdatedAt: timestamppb.Now()},
		{Entry: &statev1.CatalogEntry_Account{Account: &statev1.CloudAccount{Name: "prod", Provider: "tencentcloud", Regions: []string{"a", "b"}, SealedCredentials: []byte{1, 2}, KeyId: "k1"}}},
		{Entry: &statev1.CatalogEntry_Hook{Hook: g.GetHooks().GetAfterCreated()}, Source: "api"},
	} {
		if got := stateconv.CatalogEntryRecord(stateconv.CatalogEntry(e)); !proto.Equal(got, e) {
			t.Errorf("catalog entry:\n got %v\nwant %v", got, e)
		}
	}
	for _, nilCase := range []bool{stateconv.Group(nil) == nil, stateconv.GroupRecord(nil) == nil, stateconv.Instance(nil) == nil, stateconv.CatalogEntry(nil) == nil} {
		if !nilCase {
			t.Error("nil did not stay nil")
		}
	}
}

// An instance keeps what the gateway answers with; unset times stay unset.
func TestInstanceKeepsWhatTheGatewayAnswers(t *testing.T) {
	p := memRecord(7)
	p.LastError = &statev1.ErrorInfo{Code: "X", Message: "m", Class: 1, Retryable: true, At: timestamppb.New(time.Unix(5, 0))}
	p.CreationFailed, p.InFlight, p.Released, p.Adopted, p.Retries = true, true, true, true, 3
	in := stateconv.Instance(p)
	if in.ID != p.GetId() || in.ProviderID != p.GetProviderId() || in.NodeName != p.GetNodeName() || in.State != domain.StateRunning ||
		in.TraceParent != p.GetTraceContext()["traceparent"] || len(in.History) != 5 || in.History[4].Reason != "node ready" ||
		!in.History[4].At().Equal(p.GetHistory()[4].GetAt().AsTime()) || in.Deadline != 0 || in.NextRetryAt != 0 ||
		in.Zone != "ap-guangzhou-3" || in.InstanceType != "S5.MEDIUM4" || in.CapacityType != "spot" {
		t.Fatalf("instance = %+v", in)
	}
	want := proto.Clone(p).(*statev1.Instance)
	want.ClientToken, want.SshHostKey = "", "" // not kept: the gateway never answers with them
	if got := stateconv.InstanceRecord(in); !proto.Equal(got, want) {
		t.Errorf("instance:\n got %v\nwant %v", got, want)
	}
}

// An offerings mark keeps its offering, times and reason.
func TestOfferingMark(t *testing.T) {
	at, until := time.Unix(1_780_000_000, 0).UTC(), time.Unix(1_780_000_180, 0).UTC()
	m := stateconv.OfferingMark(&cloudv1.OfferingUnavailable{
		Target:   &cloudv1.Target{Provider: "tencentcloud", Account: "prod", Region: "ap-guangzhou"},
		Offering: &cloudv1.Offering{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4", CapacityType: "spot"},
		At:       timestamppb.New(at), Until: timestamppb.New(until),
		Reason: &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_CAPACITY, Code: "ResourceInsufficient.SpecifiedInstanceType", Message: "sold out"},
	})
	want := domain.OfferingMark{
		Ref: domain.OfferingRef{Provider: "tencentcloud", Account: "prod", Region: "ap-guangzhou", Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4", CapacityType: "spot"},
		At:  at, Until: until, Code: "ResourceInsufficient.SpecifiedInstanceType", Message: "sold out",
	}
	if m == nil || *m != want {
		t.Errorf("mark = %+v, want %+v", m, want)
	}
	if stateconv.OfferingMark(nil) != nil {
		t.Error("nil did not stay nil")
	}
}
