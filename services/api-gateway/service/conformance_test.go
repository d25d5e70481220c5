package service_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"

	"github.com/nodesmith/nodesmith/services/api-gateway/service"
)

const fakeNodeReason = "k8s.io/cluster-autoscaler/fake-node-reason"

// TestConformance drives the gRPC API over a real loopback connection the
// way Cluster Autoscaler does in its loop, once speaking the current wire
// generation (CA >= 1.35) and once the legacy one (CA 1.29-1.34), with
// requests encoded by hand.
func TestConformance(t *testing.T) {
	for _, gen := range []string{"current", "legacy"} {
		t.Run(gen, func(t *testing.T) {
			gw := startGateway(t, func(c *service.Config) {
				c.LifecycleTimeout, c.LifecycleAttemptTimeout = 2*time.Second, 500*time.Millisecond
			})
			conn, err := grpc.NewClient(gw.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			var c caClient = newCurrentClient(conn)
			if gen == "legacy" {
				c = &legacyClient{conn: conn}
			}
			runCALoop(t, c, gw)
		})
	}
}

func code(err error) codes.Code { return status.Code(err) }

func runCALoop(t *testing.T, c caClient, gw *gateway) {
	ctx := context.Background()
	mustOK := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// --- the read side of one CA loop ---
	mustOK("Refresh", c.Refresh(ctx))
	groups, err := c.NodeGroups(ctx)
	mustOK("NodeGroups", err)
	var ids []string
	for _, g := range groups {
		ids = append(ids, fmt.Sprintf("%s[%d,%d]", g.GetId(), g.GetMinSize(), g.GetMaxSize()))
		if g.GetDebug() == "" {
			t.Errorf("group %s has no debug string", g.GetId())
		}
	}
	if want := []string{"bare[0,2]", "gpu[0,4]", "web[1,10]"}; !slices.Equal(ids, want) {
		t.Fatalf("NodeGroups = %v, want %v", ids, want)
	}

	cluster := []struct {
		node  *pb.ExternalGrpcNode
		group string
	}{
		{&pb.ExternalGrpcNode{ProviderID: "tencentcloud:///ap-guangzhou/ins-web1", Name: "10.0.0.11", Labels: map[string]string{"role": "web"}}, "web"},
		{&pb.ExternalGrpcNode{ProviderID: "tencentcloud:///ap-guangzhou/ins-web2", Name: "10.0.0.12"}, "web"},
		{&pb.ExternalGrpcNode{ProviderID: "tencentcloud:///ap-guangzhou/ins-cp", Name: "control-plane"}, ""},
		{&pb.ExternalGrpcNode{Name: "10.0.0.10"}, ""}, // the name of a DELETED instance's node
		// A Node left behind by a DELETED instance: its VM is gone.
		{&pb.ExternalGrpcNode{ProviderID: "tencentcloud:///ap-guangzhou/ins-web0", Name: "10.0.0.10"}, ""},
		// CA's fake nodes for instances that have not registered.
		{&pb.ExternalGrpcNode{ProviderID: "nodesmith:///web/i-web-3", Name: "nodesmith:///web/i-web-3"}, "web"},
		{&pb.ExternalGrpcNode{ProviderID: "nodesmith:///gpu/i-gpu-1", Name: "nodesmith:///gpu/i-gpu-1"}, "gpu"},
	}
	for _, n := range cluster {
		g, err := c.NodeGroupForNode(ctx, n.node)
		mustOK("NodeGroupForNode", err)
		if g.GetId() != n.group {
			t.Errorf("NodeGroupForNode(%s) = %q, want %q", n.node.GetName(), g.GetId(), n.group)
		}
		if n.group == "web" && (g.GetMinSize() != 1 || g.GetMaxSize() != 10 || g.GetDebug() == "") {
			t.Errorf("NodeGroupForNode must fill min/max/debug: %v", g)
		}
	}

	caDefaults := caOptions{util: 0.5, gpuUtil: 0.5, unneeded: 10 * time.Minute, unready: 20 * time.Minute, maxProvision: 15 * time.Minute}
	wantTargets := map[string]int32{"web": 3, "gpu": 1, "bare": 0}
	for _, g := range groups {
		id := g.GetId()
		n, err := c.TargetSize(ctx, id)
		mustOK("TargetSize", err)
		if n != wantTargets[id] {
			t.Errorf("TargetSize(%s) = %d, want %d", id, n, wantTargets[id])
		}
		opts, err := c.GetOptions(ctx, id, caDefaults)
		mustOK("GetOptions "+id, err)
		want := caDefaults
		if id == "web" {
			want.unneeded = 2 * time.Minute // the group's override
		}
		if opts != want {
			t.Errorf("GetOptions(%s) = %+v, want %+v", id, opts, want)
		}
	}
	// Defaults with a zero max provision time (a gap in CA's conversion)
	// never yield a zero: CA would delete every new node.
	zeroProv := caDefaults
	zeroProv.maxProvision = 0
	opts, err := c.GetOptions(ctx, "bare", zeroProv)
	mustOK("GetOptions zero provision", err)
	if opts.maxProvision <= 0 {
		t.Errorf("GetOptions returned MaxNodeProvision %v", opts.maxProvision)
	}

	checkNodes(t, c, "web", map[string]string{
		"tencentcloud:///ap-guangzhou/ins-web1": "instanceRunning",
		"tencentcloud:///ap-guangzhou/ins-web2": "instanceRunning",
		"nodesmith:///web/i-web-3":              "instanceCreating",
	})
	gpuNodes, err := c.Nodes(ctx, "gpu")
	mustOK("Nodes gpu", err)
	if len(gpuNodes) != 1 || gpuNodes[0].GetStatus().GetInstanceState() != pb.InstanceStatus_instanceCreating ||
		gpuNodes[0].GetStatus().GetErrorInfo().GetErrorCode() != "ResourceInsufficient.SpecifiedInstanceType" ||
		gpuNodes[0].GetStatus().GetErrorInfo().GetInstanceErrorClass() != 1 {
		t.Errorf("a failed creation must be instanceCreating with errorInfo class 1: %v", gpuNodes)
	}

	tmpl, err := c.TemplateNodeInfo(ctx, "web")
	mustOK("TemplateNodeInfo", err)
	for k, v := range map[string]string{
		"kubernetes.io/hostname": "nodesmith-template-web", "topology.kubernetes.io/zone": "ap-guangzhou-3",
		"topology.kubernetes.io/region": "ap-guangzhou", "node.kubernetes.io/instance-type": "S5.LARGE8",
		"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "role": "web",
	} {
		if tmpl.Labels[k] != v {
			t.Errorf("template label %s = %q, want %q", k, tmpl.Labels[k], v)
		}
	}
	if tmpl.Status.Allocatable.Cpu().MilliValue() != 4000 || tmpl.Status.Allocatable.Pods().Value() != 110 || len(tmpl.Spec.Taints) != 1 {
		t.Errorf("template node resources or taints: %v %v", tmpl.Status.Allocatable, tmpl.Spec.Taints)
	}
	if _, err := c.TemplateNodeInfo(ctx, "bare"); code(err) != codes.Unimplemented {
		t.Errorf("TemplateNodeInfo without a node template = %v, want Unimplemented", err)
	}

	label, err := c.GPULabel(ctx)
	mustOK("GPULabel", err)
	types, err := c.GPUTypes(ctx)
	mustOK("GPUTypes", err)
	if label != gpuLabel || !slices.Equal(types, []string{"nvidia-t4"}) {
		t.Errorf("GPU label %q types %v", label, types)
	}

	start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	price, err := c.NodePrice(ctx, cluster[0].node, start, start.Add(2*time.Hour))
	mustOK("NodePrice", err)
	if math.Abs(price-1.0) > 1e-9 {
		t.Errorf("NodePrice = %v, want 1.0 (0.5/h for 2h)", price)
	}
	if _, err := c.NodePrice(ctx, cluster[2].node, start, start.Add(time.Hour)); code(err) != codes.NotFound {
		t.Errorf("NodePrice of an unmanaged node = %v", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "app", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
	}}}}
	price, err = c.PodPrice(ctx, pod, start, start.Add(4*time.Hour))
	mustOK("PodPrice", err)
	// Cheapest CPU-hour: web at 0.5/4 = 0.125 (gpu: 2/8 = 0.25); 1 CPU for 4h.
	if math.Abs(price-0.5) > 1e-9 {
		t.Errorf("PodPrice = %v, want 0.5", price)
	}

	// --- scale up: the new target is visible the moment the call returns ---
	mustOK("IncreaseSize", c.IncreaseSize(ctx, "web", 2))
	if n, err := c.TargetSize(ctx, "web"); err != nil || n != 5 {
		t.Fatalf("TargetSize right after IncreaseSize(+2) = %d, %v; want 5", n, err)
	}
	webNodes, err := c.Nodes(ctx, "web")
	mustOK("Nodes", err)
	var fresh []*pb.ExternalGrpcNode
	for _, in := range webNodes {
		if in.GetStatus().GetInstanceState() == pb.InstanceStatus_instanceCreating && in.GetId() != "nodesmith:///web/i-web-3" {
			fresh = append(fresh, &pb.ExternalGrpcNode{
				ProviderID: in.GetId(), Name: in.GetId(),
				Annotations: map[string]string{fakeNodeReason: "unregistered"},
			})
		}
	}
	if len(fresh) != 2 {
		t.Fatalf("after IncreaseSize(+2) Nodes lists %d new creating instances, want 2: %v", len(fresh), webNodes)
	}

	// --- CA gives up on them: DeleteNodes with fake nodes ---
	mustOK("DeleteNodes", c.DeleteNodes(ctx, "web", fresh))
	if n, _ := c.TargetSize(ctx, "web"); n != 3 {
		t.Errorf("TargetSize after DeleteNodes = %d, want 3", n)
	}
	webNodes, _ = c.Nodes(ctx, "web")
	for _, in := range webNodes {
		for _, f := range fresh {
			if in.GetId() == f.GetProviderID() && in.GetStatus().GetInstanceState() != pb.InstanceStatus_instanceDeleting {
				t.Errorf("deleted instance %s is %v, want instanceDeleting", in.GetId(), in.GetStatus().GetInstanceState())
			}
		}
	}
	if err := c.DeleteNodes(ctx, "gpu", []*pb.ExternalGrpcNode{cluster[0].node}); code(err) != codes.InvalidArgument {
		t.Errorf("DeleteNodes of another group's node = %v, want InvalidArgument", err)
	}

	// --- CA undoes a scale-up that timed out: DecreaseTargetSize ---
	mustOK("IncreaseSize", c.IncreaseSize(ctx, "web", 1))
	mustOK("DecreaseTargetSize", c.DecreaseTargetSize(ctx, "web", -1))
	if n, _ := c.TargetSize(ctx, "web"); n != 3 {
		t.Errorf("TargetSize after +1/-1 = %d, want 3", n)
	}
	if err := c.DecreaseTargetSize(ctx, "web", -1); code(err) != codes.FailedPrecondition {
		t.Errorf("DecreaseTargetSize with nothing unfulfilled = %v, want lifecycle's FailedPrecondition", err)
	}

	// --- invalid input never reaches lifecycle ---
	before := len(gw.lifecycle.Requests())
	for name, err := range map[string]error{
		"increase by 0":   c.IncreaseSize(ctx, "web", 0),
		"increase by -1":  c.IncreaseSize(ctx, "web", -1),
		"decrease by +1":  c.DecreaseTargetSize(ctx, "web", 1),
		"increase, no id": c.IncreaseSize(ctx, "", 1),
		"delete nothing":  c.DeleteNodes(ctx, "web", nil),
	} {
		if code(err) != codes.InvalidArgument {
			t.Errorf("%s = %v, want InvalidArgument", name, err)
		}
	}
	if after := len(gw.lifecycle.Requests()); after != before {
		t.Errorf("invalid requests reached lifecycle (%d -> %d)", before, after)
	}
	if _, err := c.TargetSize(ctx, "nope"); code(err) != codes.NotFound {
		t.Errorf("TargetSize of an unknown group = %v, want NotFound", err)
	}
	if err := c.IncreaseSize(ctx, "web", 100); code(err) != codes.OutOfRange {
		t.Errorf("IncreaseSize past max = %v, want lifecycle's OutOfRange", err)
	}

	// --- lifecycle leader gone: the gateway's own answer within CA's deadline ---
	// Every call of the test client carries CA's grpc_timeout (5 s, see
	// caLock.call). The gateway answers before it: Unavailable when every
	// attempt found no leader, or its own DeadlineExceeded saying the
	// outcome is unknown when its deadline cut an attempt in flight (on a
	// loaded machine the last attempt's "no responders" can arrive after
	// it). CA's own deadline would read "context deadline exceeded".
	gw.lifecycle.Stop()
	err = c.IncreaseSize(ctx, "web", 1)
	st, _ := status.FromError(err)
	gatewayUnknown := st.Code() == codes.DeadlineExceeded && strings.Contains(st.Message(), "lifecycle did not answer in time")
	if st.Code() != codes.Unavailable && !gatewayUnknown {
		t.Errorf("IncreaseSize without a lifecycle leader = %v, want the gateway's Unavailable (or its unknown outcome)", err)
	}
	// Reads do not care.
	mustOK("Refresh without lifecycle", c.Refresh(ctx))
	mustOK("Cleanup", c.Cleanup(ctx))
}

func checkNodes(t *testing.T, c caClient, group string, want map[string]string) {
	t.Helper()
	got, err := c.Nodes(context.Background(), group)
	if err != nil {
		t.Fatalf("Nodes(%s): %v", group, err)
	}
	have := map[string]string{}
	for _, in := range got {
		have[in.GetId()] = in.GetStatus().GetInstanceState().String()
	}
	keys := func(m map[string]string) []string {
		var k []string
		for x, v := range m {
			k = append(k, x+"="+v)
		}
		sort.Strings(k)
		return k
	}
	if !slices.Equal(keys(have), keys(want)) {
		t.Errorf("Nodes(%s) = %v, want %v", group, keys(have), keys(want))
	}
}
