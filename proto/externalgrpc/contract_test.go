package externalgrpc_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nodesmith/nodesmith/proto/externalgrpc"
)

// The wire contract from shared/design/EXTERNALGRPC.md, transcribed by hand:
// message -> "field=number:type". Types are protobuf kinds, with the message
// or enum full name for message/enum fields, "map<k,v>" for maps and a
// "repeated " prefix for lists. Legacy (CA 1.29-1.34) fields are included.
var contract = map[string][]string{
	"NodeGroup":                           {"id=1:string", "minSize=2:int32", "maxSize=3:int32", "debug=4:string"},
	"ExternalGrpcNode":                    {"providerID=1:string", "name=2:string", "labels=3:map<string,string>", "annotations=4:map<string,string>"},
	"NodeGroupsRequest":                   {},
	"NodeGroupsResponse":                  {"nodeGroups=1:repeated .NodeGroup"},
	"NodeGroupForNodeRequest":             {"node=1:.ExternalGrpcNode"},
	"NodeGroupForNodeResponse":            {"nodeGroup=1:.NodeGroup"},
	"PricingNodePriceRequest":             {"node=1:.ExternalGrpcNode", "startTime=2:.LegacyTime", "endTime=3:.LegacyTime", "startTimestamp=4:google.protobuf.Timestamp", "endTimestamp=5:google.protobuf.Timestamp"},
	"PricingNodePriceResponse":            {"price=1:double"},
	"PricingPodPriceRequest":              {"pod=1:bytes", "startTime=2:.LegacyTime", "endTime=3:.LegacyTime", "pod_bytes=4:bytes", "startTimestamp=5:google.protobuf.Timestamp", "endTimestamp=6:google.protobuf.Timestamp"},
	"PricingPodPriceResponse":             {"price=1:double"},
	"GPULabelRequest":                     {},
	"GPULabelResponse":                    {"label=1:string"},
	"GetAvailableGPUTypesRequest":         {},
	"GetAvailableGPUTypesResponse":        {"gpuTypes=1:map<string,google.protobuf.Any>"},
	"CleanupRequest":                      {},
	"CleanupResponse":                     {},
	"RefreshRequest":                      {},
	"RefreshResponse":                     {},
	"NodeGroupTargetSizeRequest":          {"id=1:string"},
	"NodeGroupTargetSizeResponse":         {"targetSize=1:int32"},
	"NodeGroupIncreaseSizeRequest":        {"delta=1:int32", "id=2:string"},
	"NodeGroupIncreaseSizeResponse":       {},
	"NodeGroupDeleteNodesRequest":         {"nodes=1:repeated .ExternalGrpcNode", "id=2:string"},
	"NodeGroupDeleteNodesResponse":        {},
	"NodeGroupDecreaseTargetSizeRequest":  {"delta=1:int32", "id=2:string"},
	"NodeGroupDecreaseTargetSizeResponse": {},
	"NodeGroupNodesRequest":               {"id=1:string"},
	"NodeGroupNodesResponse":              {"instances=1:repeated .Instance"},
	"Instance":                            {"id=1:string", "status=2:.InstanceStatus"},
	"InstanceStatus":                      {"instanceState=1:.InstanceStatus.InstanceState", "errorInfo=2:.InstanceErrorInfo"},
	"InstanceErrorInfo":                   {"errorCode=1:string", "errorMessage=2:string", "instanceErrorClass=3:int32"},
	"NodeGroupTemplateNodeInfoRequest":    {"id=1:string"},
	"NodeGroupTemplateNodeInfoResponse":   {"nodeInfo=1:bytes", "nodeBytes=2:bytes"},
	"NodeGroupAutoscalingOptions": {
		"scaleDownUtilizationThreshold=1:double", "scaleDownGpuUtilizationThreshold=2:double",
		"scaleDownUnneededTime=3:.LegacyDuration", "scaleDownUnreadyTime=4:.LegacyDuration", "MaxNodeProvisionTime=5:.LegacyDuration",
		"zeroOrMaxNodeScaling=6:bool", "ignoreDaemonSetsUtilization=7:bool",
		"scaleDownUnneededDuration=8:google.protobuf.Duration", "scaleDownUnreadyDuration=9:google.protobuf.Duration", "MaxNodeProvisionDuration=10:google.protobuf.Duration",
	},
	"NodeGroupAutoscalingOptionsRequest":  {"id=1:string", "defaults=2:.NodeGroupAutoscalingOptions"},
	"NodeGroupAutoscalingOptionsResponse": {"nodeGroupAutoscalingOptions=1:.NodeGroupAutoscalingOptions"},
	// Wire forms of the legacy apimachinery types.
	"LegacyTime":     {"seconds=1:int64", "nanos=2:int32"},
	"LegacyDuration": {"duration=1:int64"},
}

var rpcs = map[string]string{
	"NodeGroups":                  "NodeGroupsRequest->NodeGroupsResponse",
	"NodeGroupForNode":            "NodeGroupForNodeRequest->NodeGroupForNodeResponse",
	"PricingNodePrice":            "PricingNodePriceRequest->PricingNodePriceResponse",
	"PricingPodPrice":             "PricingPodPriceRequest->PricingPodPriceResponse",
	"GPULabel":                    "GPULabelRequest->GPULabelResponse",
	"GetAvailableGPUTypes":        "GetAvailableGPUTypesRequest->GetAvailableGPUTypesResponse",
	"Cleanup":                     "CleanupRequest->CleanupResponse",
	"Refresh":                     "RefreshRequest->RefreshResponse",
	"NodeGroupTargetSize":         "NodeGroupTargetSizeRequest->NodeGroupTargetSizeResponse",
	"NodeGroupIncreaseSize":       "NodeGroupIncreaseSizeRequest->NodeGroupIncreaseSizeResponse",
	"NodeGroupDeleteNodes":        "NodeGroupDeleteNodesRequest->NodeGroupDeleteNodesResponse",
	"NodeGroupDecreaseTargetSize": "NodeGroupDecreaseTargetSizeRequest->NodeGroupDecreaseTargetSizeResponse",
	"NodeGroupNodes":              "NodeGroupNodesRequest->NodeGroupNodesResponse",
	"NodeGroupTemplateNodeInfo":   "NodeGroupTemplateNodeInfoRequest->NodeGroupTemplateNodeInfoResponse",
	"NodeGroupGetOptions":         "NodeGroupAutoscalingOptionsRequest->NodeGroupAutoscalingOptionsResponse",
}

const pkg = "clusterautoscaler.cloudprovider.v1.externalgrpc"

func fileDesc() protoreflect.FileDescriptor {
	return externalgrpc.File_externalgrpc_externalgrpc_proto
}

func shortName(n protoreflect.FullName) string {
	return strings.TrimPrefix(string(n), pkg)
}

func fieldType(f protoreflect.FieldDescriptor) string {
	if f.IsMap() {
		return fmt.Sprintf("map<%s,%s>", fieldType(f.MapKey()), fieldType(f.MapValue()))
	}
	var t string
	switch f.Kind() {
	case protoreflect.MessageKind:
		t = shortName(f.Message().FullName())
	case protoreflect.EnumKind:
		t = shortName(f.Enum().FullName())
	default:
		t = f.Kind().String()
	}
	if f.IsList() {
		t = "repeated " + t
	}
	return t
}

func TestPackageAndService(t *testing.T) {
	fd := fileDesc()
	if fd.Package() != pkg {
		t.Fatalf("package = %s, want %s", fd.Package(), pkg)
	}
	svc := fd.Services().ByName("CloudProvider")
	if svc == nil {
		t.Fatal("service CloudProvider missing")
	}
	if got := svc.Methods().Len(); got != len(rpcs) {
		t.Errorf("service has %d RPCs, contract has %d", got, len(rpcs))
	}
	for name, sig := range rpcs {
		m := svc.Methods().ByName(protoreflect.Name(name))
		if m == nil {
			t.Errorf("RPC %s missing", name)
			continue
		}
		got := string(m.Input().Name()) + "->" + string(m.Output().Name())
		if got != sig {
			t.Errorf("RPC %s is %s, want %s", name, got, sig)
		}
		if m.IsStreamingClient() || m.IsStreamingServer() {
			t.Errorf("RPC %s must be unary", name)
		}
	}
	// Imports allowed by CA >= 1.35: any, timestamp, duration only.
	for i := 0; i < fd.Imports().Len(); i++ {
		switch p := fd.Imports().Get(i).Path(); p {
		case "google/protobuf/any.proto", "google/protobuf/timestamp.proto", "google/protobuf/duration.proto":
		default:
			t.Errorf("unexpected import %s", p)
		}
	}
}

func TestMessagesMatchContract(t *testing.T) {
	msgs := fileDesc().Messages()
	seen := map[string]bool{}
	for i := 0; i < msgs.Len(); i++ {
		seen[string(msgs.Get(i).Name())] = true
	}
	for name, want := range contract {
		md := msgs.ByName(protoreflect.Name(name))
		if md == nil {
			t.Errorf("message %s missing", name)
			continue
		}
		var got []string
		for j := 0; j < md.Fields().Len(); j++ {
			f := md.Fields().Get(j)
			got = append(got, fmt.Sprintf("%s=%d:%s", f.Name(), f.Number(), fieldType(f)))
		}
		sort.Strings(got)
		w := append([]string(nil), want...)
		sort.Strings(w)
		if strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("message %s:\n got  %v\n want %v", name, got, w)
		}
		delete(seen, name)
	}
	for extra := range seen {
		t.Errorf("message %s is not in the contract", extra)
	}
}

func TestInstanceStateEnum(t *testing.T) {
	e := fileDesc().Messages().ByName("InstanceStatus").Enums().ByName("InstanceState")
	if e == nil {
		t.Fatal("InstanceStatus.InstanceState missing")
	}
	want := map[string]int32{"unspecified": 0, "instanceRunning": 1, "instanceCreating": 2, "instanceDeleting": 3}
	if e.Values().Len() != len(want) {
		t.Errorf("enum has %d values, want %d", e.Values().Len(), len(want))
	}
	for name, num := range want {
		v := e.Values().ByName(protoreflect.Name(name))
		if v == nil || int32(v.Number()) != num {
			t.Errorf("enum value %s = %v, want %d", name, v, num)
		}
	}
}

// TestJSONNamesKeepUpstreamSpelling guards the quirks CA's JSON mapping and
// grpcurl users depend on.
func TestJSONNamesKeepUpstreamSpelling(t *testing.T) {
	md := fileDesc().Messages().ByName("NodeGroupAutoscalingOptions")
	if f := md.Fields().ByNumber(10); f.Name() != "MaxNodeProvisionDuration" {
		t.Errorf("field 10 = %s", f.Name())
	}
	pod := fileDesc().Messages().ByName("PricingPodPriceRequest")
	if f := pod.Fields().ByNumber(4); f.Name() != "pod_bytes" {
		t.Errorf("field 4 = %s", f.Name())
	}
}
