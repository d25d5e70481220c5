package grpcapi_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/grpcapi"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/natsreq"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

func fullGroup() *domain.NodeGroup {
	return &domain.NodeGroup{
		ID: "GPU_pool.1", MinSize: 0, MaxSize: 8, TargetSize: 0,
		InstanceTemplate: &domain.InstanceTemplate{
			Name: "gn7", Provider: "tencentcloud", Region: "ap-shanghai", Zone: "ap-shanghai-5",
			InstanceType: "GN7.2XLARGE32", Arch: "arm64", HourlyPrice: 2.5,
		},
		NodeTemplate: &domain.NodeTemplate{
			Labels:      map[string]string{"nodesmith.io/gpu-type": "nvidia-t4", "topology.kubernetes.io/zone": "override-zone", "kubernetes.io/hostname": "ignored"},
			Annotations: map[string]string{"note": "x"},
			Taints:      []domain.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}},
			Capacity:    map[string]string{"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1", "ephemeral-storage": "100Gi"},
			Allocatable: map[string]string{"cpu": "7800m", "memory": "30Gi"},
		},
	}
}

func TestTemplateNode(t *testing.T) {
	node, err := grpcapi.TemplateNode(fullGroup())
	if err != nil {
		t.Fatal(err)
	}
	name := "nodesmith-template-gpu-pool-1"
	wantLabels := map[string]string{
		"kubernetes.io/hostname":                   name,
		"kubernetes.io/arch":                       "arm64",
		"kubernetes.io/os":                         "linux",
		"beta.kubernetes.io/arch":                  "arm64",
		"beta.kubernetes.io/os":                    "linux",
		"node.kubernetes.io/instance-type":         "GN7.2XLARGE32",
		"beta.kubernetes.io/instance-type":         "GN7.2XLARGE32",
		"topology.kubernetes.io/zone":              "override-zone", // the template's own label wins
		"failure-domain.beta.kubernetes.io/zone":   "ap-shanghai-5",
		"topology.kubernetes.io/region":            "ap-shanghai",
		"failure-domain.beta.kubernetes.io/region": "ap-shanghai",
		"nodesmith.io/gpu-type":                    "nvidia-t4",
		app.GroupLabel:                             "GPU_pool.1",
	}
	if node.Name != name || !maps.Equal(node.Labels, wantLabels) {
		t.Errorf("name %q labels:\n got %v\nwant %v", node.Name, node.Labels, wantLabels)
	}
	q := resource.MustParse
	wantCap := corev1.ResourceList{"cpu": q("8"), "memory": q("32Gi"), "nvidia.com/gpu": q("1"), "ephemeral-storage": q("100Gi"), "pods": q("110")}
	wantAlloc := corev1.ResourceList{"cpu": q("7800m"), "memory": q("30Gi"), "nvidia.com/gpu": q("1"), "ephemeral-storage": q("100Gi"), "pods": q("110")}
	for what, pair := range map[string][2]corev1.ResourceList{"capacity": {node.Status.Capacity, wantCap}, "allocatable": {node.Status.Allocatable, wantAlloc}} {
		got, want := pair[0], pair[1]
		if len(got) != len(want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
		for k, v := range want {
			if g, ok := got[k]; !ok || g.Cmp(v) != 0 {
				t.Errorf("%s[%s] = %v, want %v", what, k, got[k], v)
			}
		}
	}
	if len(node.Spec.Taints) != 1 || node.Spec.Taints[0] != (corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}) {
		t.Errorf("taints = %v", node.Spec.Taints)
	}
	ready := false
	for _, c := range node.Status.Conditions {
		ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
	}
	if !ready {
		t.Error("template node is not Ready")
	}
	if node.Status.NodeInfo.Architecture != "arm64" || node.Status.NodeInfo.OperatingSystem != "linux" {
		t.Errorf("node info = %+v", node.Status.NodeInfo)
	}

	// It survives the wire: CA decodes these bytes with v1.Node.Unmarshal.
	b, err := node.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var back corev1.Node
	if err := back.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	if back.Name != name || back.Status.Capacity.Cpu().MilliValue() != 8000 || back.Labels["kubernetes.io/arch"] != "arm64" {
		t.Errorf("round trip lost data: %+v", back.ObjectMeta)
	}
}

func TestTemplateNodeErrors(t *testing.T) {
	noTemplate := fullGroup()
	noTemplate.NodeTemplate = nil
	badQty := fullGroup()
	badQty.NodeTemplate.Capacity["cpu"] = "eight"
	negQty := fullGroup()
	negQty.NodeTemplate.Allocatable["memory"] = "-1Gi"
	badTaint := fullGroup()
	badTaint.NodeTemplate.Taints[0].Effect = "Sometimes"
	minimal := &domain.NodeGroup{ID: "m", NodeTemplate: &domain.NodeTemplate{}}

	tests := []struct {
		name string
		g    *domain.NodeGroup
		code domain.Code
	}{
		{"no node template", noTemplate, contract.CodeUnimplemented},
		{"bad quantity", badQty, contract.CodeFailedPrecondition},
		{"negative quantity", negQty, contract.CodeFailedPrecondition},
		{"bad taint effect", badTaint, contract.CodeFailedPrecondition},
		{"minimal template", minimal, contract.CodeOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node, err := grpcapi.TemplateNode(tt.g)
			if domain.CodeOf(err) != tt.code {
				t.Fatalf("err = %v, want %v", err, tt.code)
			}
			if err == nil {
				if node.Status.Capacity.Pods().Value() != grpcapi.DefaultMaxPods || node.Labels["kubernetes.io/os"] != "linux" || node.Labels["kubernetes.io/arch"] != "amd64" {
					t.Errorf("defaults missing: capacity %v labels %v", node.Status.Capacity, node.Labels)
				}
			}
		})
	}
}

func TestTemplateNodeName(t *testing.T) {
	for in, want := range map[string]string{
		"web":                           "nodesmith-template-web",
		"GPU_pool.1":                    "nodesmith-template-gpu-pool-1",
		"trailing_":                     "nodesmith-template-trailing",
		"x" + string(make([]byte, 100)): "nodesmith-template-x",
	} {
		got := grpcapi.TemplateNodeName(in)
		if got != want || len(got) > 63 {
			t.Errorf("TemplateNodeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPodMilliCPU(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	c := func(cpu string) corev1.Container {
		ctr := corev1.Container{}
		if cpu != "" {
			ctr.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
		}
		return ctr
	}
	sidecar := func(cpu string) corev1.Container { ctr := c(cpu); ctr.RestartPolicy = &always; return ctr }
	tests := []struct {
		name string
		spec corev1.PodSpec
		want int64
	}{
		{"no requests", corev1.PodSpec{Containers: []corev1.Container{c("")}}, 0},
		{"sum of containers", corev1.PodSpec{Containers: []corev1.Container{c("250m"), c("1")}}, 1250},
		{"init container larger", corev1.PodSpec{Containers: []corev1.Container{c("100m")}, InitContainers: []corev1.Container{c("2")}}, 2000},
		{"sidecar adds", corev1.PodSpec{Containers: []corev1.Container{c("1")}, InitContainers: []corev1.Container{sidecar("500m")}}, 1500},
		{"init after sidecar", corev1.PodSpec{Containers: []corev1.Container{c("100m")}, InitContainers: []corev1.Container{sidecar("500m"), c("1")}}, 1500},
		{"overhead", corev1.PodSpec{Containers: []corev1.Container{c("1")}, Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}, 1100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := grpcapi.PodMilliCPU(&corev1.Pod{Spec: tt.spec}); got != tt.want {
				t.Errorf("PodMilliCPU = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestOptionsWireGenerations(t *testing.T) {
	legacyOnly := &pb.NodeGroupAutoscalingOptions{
		ScaleDownUtilizationThreshold: 0.5, ScaleDownGpuUtilizationThreshold: 0.4,
		ScaleDownUnneededTime: &pb.LegacyDuration{Duration: int64(10 * time.Minute)},
		ScaleDownUnreadyTime:  &pb.LegacyDuration{Duration: int64(20 * time.Minute)},
		MaxNodeProvisionTime:  &pb.LegacyDuration{Duration: int64(15 * time.Minute)},
	}
	mixed := &pb.NodeGroupAutoscalingOptions{
		ScaleDownUtilizationThreshold: 0.5,
		ScaleDownUnneededTime:         &pb.LegacyDuration{Duration: int64(10 * time.Minute)},
		ScaleDownUnneededDuration:     durationpb.New(3 * time.Minute),
		MaxNodeProvisionTime:          &pb.LegacyDuration{Duration: int64(15 * time.Minute)},
		MaxNodeProvisionDuration:      durationpb.New(0), // a conversion gap, not a choice
	}
	tests := []struct {
		name                        string
		in                          *pb.NodeGroupAutoscalingOptions
		unneeded, unready, provTime time.Duration
	}{
		{"legacy only", legacyOnly, 10 * time.Minute, 20 * time.Minute, 15 * time.Minute},
		{"current wins, zero current loses to legacy", mixed, 3 * time.Minute, 20 * time.Minute, 15 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, ok := domain.ResolveOptions(grpcapi.DecodeDefaults(tt.in), domain.PartialOptions{})
			if !ok {
				t.Fatal("defaults not recognised")
			}
			out := grpcapi.EncodeOptions(opts)
			check := func(field string, cur *durationpb.Duration, leg *pb.LegacyDuration, want time.Duration) {
				if cur.AsDuration() != want || time.Duration(leg.GetDuration()) != want {
					t.Errorf("%s = %v (current) / %v (legacy), want %v in both", field, cur.AsDuration(), time.Duration(leg.GetDuration()), want)
				}
			}
			check("unneeded", out.GetScaleDownUnneededDuration(), out.GetScaleDownUnneededTime(), tt.unneeded)
			check("unready", out.GetScaleDownUnreadyDuration(), out.GetScaleDownUnreadyTime(), tt.unready)
			check("max provision", out.GetMaxNodeProvisionDuration(), out.GetMaxNodeProvisionTime(), tt.provTime)
		})
	}
	if !grpcapi.DecodeDefaults(nil).IsEmpty() || !grpcapi.DecodeDefaults(&pb.NodeGroupAutoscalingOptions{}).IsEmpty() {
		t.Error("absent or empty defaults must give nothing")
	}
}

// newServer returns a Server over a synced read model holding groups.
func newServer(t testing.TB, groups ...*domain.NodeGroup) (*grpcapi.Server, *app.ReadModel) {
	t.Helper()
	rm := app.NewReadModel()
	for i, g := range groups {
		rm.PutGroup(g.ID, uint64(i+1), g)
	}
	rm.MarkSynced(app.BucketGroups, nil)
	rm.MarkSynced(app.BucketInstances, nil)
	rm.MarkSynced(app.BucketCatalog, nil)
	svc := app.NewService(rm, &natsreq.Fake{}, app.Config{GPULabel: "nodesmith.io/gpu-type", OpTimeout: time.Second}, nil)
	return grpcapi.NewServer(svc), rm
}

func TestPricingReadsBothTimeGenerations(t *testing.T) {
	srv, _ := newServer(t, fullGroup())
	start := time.Unix(1_700_000_000, 0)
	node := &pb.ExternalGrpcNode{Name: "template", Labels: map[string]string{app.GroupLabel: "GPU_pool.1"}}
	reqs := map[string]*pb.PricingNodePriceRequest{
		"current": {Node: node, StartTimestamp: timestamppb.New(start), EndTimestamp: timestamppb.New(start.Add(2 * time.Hour))},
		"legacy":  {Node: node, StartTime: &pb.LegacyTime{Seconds: start.Unix()}, EndTime: &pb.LegacyTime{Seconds: start.Add(2 * time.Hour).Unix()}},
		"both, current wins": {Node: node, StartTimestamp: timestamppb.New(start), EndTimestamp: timestamppb.New(start.Add(2 * time.Hour)),
			StartTime: &pb.LegacyTime{Seconds: 1}, EndTime: &pb.LegacyTime{Seconds: 2}},
	}
	for name, req := range reqs {
		resp, err := srv.PricingNodePrice(context.Background(), req)
		if err != nil || fmt.Sprintf("%.3f", resp.GetPrice()) != "5.000" {
			t.Errorf("%s: price %v, %v; want 5", name, resp.GetPrice(), err)
		}
	}
	_, err := srv.PricingNodePrice(context.Background(), &pb.PricingNodePriceRequest{Node: node})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("no times: %v", err)
	}
}

func TestPodPriceDecodesBothGenerations(t *testing.T) {
	srv, _ := newServer(t, fullGroup())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
		}}}},
	}
	raw, err := pod.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1_700_000_000, 0)
	// 2 of 8 CPUs at 2.5/h for 4h = 2.5
	for name, req := range map[string]*pb.PricingPodPriceRequest{
		"current": {PodBytes: raw, StartTimestamp: timestamppb.New(start), EndTimestamp: timestamppb.New(start.Add(4 * time.Hour))},
		"legacy":  {Pod: raw, StartTime: &pb.LegacyTime{Seconds: start.Unix()}, EndTime: &pb.LegacyTime{Seconds: start.Add(4 * time.Hour).Unix()}},
	} {
		resp, err := srv.PricingPodPrice(context.Background(), req)
		if err != nil || fmt.Sprintf("%.3f", resp.GetPrice()) != "2.500" {
			t.Errorf("%s: price %v, %v; want 2.5", name, resp.GetPrice(), err)
		}
	}
	if _, err := srv.PricingPodPrice(context.Background(), &pb.PricingPodPriceRequest{PodBytes: []byte{0xff, 0x01}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("garbage pod: %v", err)
	}
}

// The series resolved once per method count every call: OK calls on the
// method's OK series, created on its first success, and the others by
// their code; the latency histogram sees them all, per method.
func TestInterceptorCountsEveryCallPerMethod(t *testing.T) {
	reg := prometheus.NewRegistry()
	ic := grpcapi.UnaryInterceptor(grpcapi.NewMetrics(reg), nil)
	const svc = "/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/"
	ok := func(context.Context, any) (any, error) { return nil, nil }
	notFound := func(context.Context, any) (any, error) { return nil, status.Error(codes.NotFound, "x") }
	for _, c := range []struct {
		method  string
		handler grpc.UnaryHandler
	}{{"NodeGroupTargetSize", notFound}, {"NodeGroupTargetSize", ok}, {"NodeGroupTargetSize", ok}, {"NodeGroups", ok}, {"NodeGroupTargetSize", ok}} {
		_, _ = ic(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: svc + c.method}, c.handler)
	}
	const want = `
# HELP nodesmith_gateway_grpc_requests_total gRPC requests handled, by method and status code.
# TYPE nodesmith_gateway_grpc_requests_total counter
nodesmith_gateway_grpc_requests_total{code="NotFound",method="NodeGroupTargetSize"} 1
nodesmith_gateway_grpc_requests_total{code="OK",method="NodeGroupTargetSize"} 3
nodesmith_gateway_grpc_requests_total{code="OK",method="NodeGroups"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "nodesmith_gateway_grpc_requests_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "nodesmith_gateway_grpc_request_duration_seconds"); n != 2 {
		t.Errorf("%d latency series, want one per method (2)", n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "nodesmith_gateway_grpc_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			want := map[string]uint64{"NodeGroupTargetSize": 4, "NodeGroups": 1}[m.GetLabel()[0].GetValue()]
			if got := m.GetHistogram().GetSampleCount(); got != want {
				t.Errorf("latency of %s: %d samples, want %d", m.GetLabel()[0].GetValue(), got, want)
			}
		}
	}
}

func TestInterceptorRecoversAndCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	ic := grpcapi.UnaryInterceptor(grpcapi.NewMetrics(reg), nil)
	info := &grpc.UnaryServerInfo{FullMethod: "/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/NodeGroups"}
	_, err := ic(context.Background(), nil, info, func(context.Context, any) (any, error) { panic("boom") })
	if status.Code(err) != codes.Internal {
		t.Fatalf("panic became %v, want Internal", err)
	}
	_, err = ic(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, status.Error(codes.NotFound, "x") })
	if status.Code(err) != codes.NotFound {
		t.Fatalf("error changed: %v", err)
	}
	const want = `
# HELP nodesmith_gateway_grpc_requests_total gRPC requests handled, by method and status code.
# TYPE nodesmith_gateway_grpc_requests_total counter
nodesmith_gateway_grpc_requests_total{code="Internal",method="NodeGroups"} 1
nodesmith_gateway_grpc_requests_total{code="NotFound",method="NodeGroups"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "nodesmith_gateway_grpc_requests_total"); err != nil {
		t.Fatal(err)
	}
}
