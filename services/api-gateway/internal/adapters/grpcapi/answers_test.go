package grpcapi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// The answers CA asks for again and again are built once per revision of
// the group: a repeated question gets the very same message, and a change
// of the group (a new record in the read model) or of CA's defaults gets a
// new answer at once.
func TestReadyAnswersFollowChanges(t *testing.T) {
	ctx := context.Background()
	group := func(max int32, unneeded time.Duration, cpu string) *domain.NodeGroup {
		return &domain.NodeGroup{
			ID: "web", MinSize: 1, MaxSize: max, TargetSize: 2,
			AutoscalingOptions: &domain.PartialOptions{ScaleDownUnneeded: new(unneeded)},
			NodeTemplate:       &domain.NodeTemplate{Capacity: map[string]string{"cpu": cpu, "memory": "4Gi"}},
		}
	}
	srv, rm := newServer(t, group(10, 2*time.Minute, "2"))
	rm.PutInstance("web.i-1", 1, &domain.Instance{ID: "i-1", Group: "web", State: domain.StateRunning, ProviderID: "tencentcloud:///ins-1"})
	optsReq := &pb.NodeGroupAutoscalingOptionsRequest{Id: "web", Defaults: caDefaults}
	nodeReq := &pb.NodeGroupForNodeRequest{Node: &pb.ExternalGrpcNode{ProviderID: "tencentcloud:///ins-1"}}
	tplReq := &pb.NodeGroupTemplateNodeInfoRequest{Id: "web"}

	type answers struct {
		opts *pb.NodeGroupAutoscalingOptionsResponse
		node *pb.NodeGroupForNodeResponse
		tpl  *pb.NodeGroupTemplateNodeInfoResponse
	}
	ask := func() answers {
		t.Helper()
		o, err := srv.NodeGroupGetOptions(ctx, optsReq)
		if err != nil {
			t.Fatal(err)
		}
		n, err := srv.NodeGroupForNode(ctx, nodeReq)
		if err != nil {
			t.Fatal(err)
		}
		tp, err := srv.NodeGroupTemplateNodeInfo(ctx, tplReq)
		if err != nil {
			t.Fatal(err)
		}
		return answers{o, n, tp}
	}
	cpu := func(a answers) string {
		var node corev1.Node
		if err := node.Unmarshal(a.tpl.GetNodeBytes()); err != nil {
			t.Fatal(err)
		}
		q := node.Status.Capacity[corev1.ResourceCPU]
		return q.String()
	}

	first := ask()
	if got := first.opts.GetNodeGroupAutoscalingOptions().GetScaleDownUnneededDuration().AsDuration(); got != 2*time.Minute {
		t.Fatalf("unneeded = %v, want the group's 2m", got)
	}
	if first.node.GetNodeGroup().GetMaxSize() != 10 || cpu(first) != "2" {
		t.Fatalf("first answers: max %d, cpu %s", first.node.GetNodeGroup().GetMaxSize(), cpu(first))
	}
	if again := ask(); again != first {
		t.Error("the same question about the same revision built a new answer")
	}

	// The group changes: every answer follows.
	rm.PutGroup("web", 2, group(20, 7*time.Minute, "4"))
	changed := ask()
	if got := changed.opts.GetNodeGroupAutoscalingOptions().GetScaleDownUnneededDuration().AsDuration(); got != 7*time.Minute {
		t.Errorf("after the change, unneeded = %v, want 7m", got)
	}
	if got := time.Duration(changed.opts.GetNodeGroupAutoscalingOptions().GetScaleDownUnneededTime().GetDuration()); got != 7*time.Minute {
		t.Errorf("after the change, legacy unneeded = %v, want 7m", got)
	}
	if changed.node.GetNodeGroup().GetMaxSize() != 20 {
		t.Errorf("after the change, NodeGroupForNode max = %d, want 20", changed.node.GetNodeGroup().GetMaxSize())
	}
	if cpu(changed) != "4" {
		t.Errorf("after the change, the template's cpu = %s, want 4", cpu(changed))
	}
	// The answer to earlier questions is untouched (gRPC may be encoding it).
	if first.opts.GetNodeGroupAutoscalingOptions().GetScaleDownUnneededDuration().AsDuration() != 2*time.Minute || first.node.GetNodeGroup().GetMaxSize() != 10 {
		t.Error("a change modified an answer already given")
	}

	// Other defaults: another answer, and back.
	other := proto.CloneOf(caDefaults)
	other.ScaleDownUtilizationThreshold = 0.3
	o, err := srv.NodeGroupGetOptions(ctx, &pb.NodeGroupAutoscalingOptionsRequest{Id: "web", Defaults: other})
	if err != nil || o.GetNodeGroupAutoscalingOptions().GetScaleDownUtilizationThreshold() != 0.3 {
		t.Errorf("other defaults: %v, %v; want threshold 0.3", o, err)
	}
	if o, err := srv.NodeGroupGetOptions(ctx, optsReq); err != nil || o.GetNodeGroupAutoscalingOptions().GetScaleDownUtilizationThreshold() != 0.5 {
		t.Errorf("CA's defaults again: %v, %v; want threshold 0.5", o, err)
	}

	// Neither the group nor CA gives options: Unimplemented, every time.
	rm.PutGroup("web", 3, &domain.NodeGroup{ID: "web", MaxSize: 20})
	for range 2 {
		if _, err := srv.NodeGroupGetOptions(ctx, &pb.NodeGroupAutoscalingOptionsRequest{Id: "web"}); status.Code(err) != codes.Unimplemented {
			t.Errorf("no options anywhere: %v, want Unimplemented", err)
		}
	}
	// A deleted group has no answers.
	rm.DeleteGroup("web", 4)
	if _, err := srv.NodeGroupGetOptions(ctx, optsReq); status.Code(err) != codes.NotFound {
		t.Errorf("deleted group: %v, want NotFound", err)
	}
	if n, err := srv.NodeGroupForNode(ctx, nodeReq); err != nil || n.GetNodeGroup().GetId() != "" {
		t.Errorf("node of a deleted group: %v, %v; want unmanaged", n, err)
	}
}

// CA's calls per node cost no allocation beyond what gRPC needs: the
// answers are ready messages (BenchmarkNodeGroupGetOptions and
// BenchmarkNodeGroupForNode measure their time).
func TestReadyAnswersAllocateNothing(t *testing.T) {
	srv, rm := newServer(t, &domain.NodeGroup{ID: "web", MaxSize: 10,
		AutoscalingOptions: &domain.PartialOptions{ScaleDownUnneeded: new(time.Minute)},
		NodeTemplate:       &domain.NodeTemplate{Capacity: map[string]string{"cpu": "2"}}})
	rm.PutInstance("web.i-1", 1, &domain.Instance{ID: "i-1", Group: "web", State: domain.StateRunning, ProviderID: "tencentcloud:///ins-1", NodeName: "10.0.0.1"})
	ctx := context.Background()
	optsReq := &pb.NodeGroupAutoscalingOptionsRequest{Id: "web", Defaults: caDefaults}
	nodeReq := &pb.NodeGroupForNodeRequest{Node: &pb.ExternalGrpcNode{ProviderID: "tencentcloud:///ins-1", Name: "10.0.0.1"}}
	cpReq := &pb.NodeGroupForNodeRequest{Node: &pb.ExternalGrpcNode{ProviderID: "kind://cp", Name: "cp"}}
	tplReq := &pb.NodeGroupTemplateNodeInfoRequest{Id: "web"}
	for name, call := range map[string]func() error{
		"NodeGroupGetOptions": func() error {
			_, err := srv.NodeGroupGetOptions(ctx, optsReq)
			return err
		},
		"NodeGroupForNode": func() error {
			_, err := srv.NodeGroupForNode(ctx, nodeReq)
			return err
		},
		"NodeGroupForNode, unmanaged": func() error {
			_, err := srv.NodeGroupForNode(ctx, cpReq)
			return err
		},
		"NodeGroupTemplateNodeInfo": func() error {
			_, err := srv.NodeGroupTemplateNodeInfo(ctx, tplReq)
			return err
		},
	} {
		if err := call(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := testing.AllocsPerRun(100, func() { _ = call() }); got != 0 {
			t.Errorf("%s: %v allocations per call, want none", name, got)
		}
	}
}

// Readers and a writer at once (run with -race): every answer is one
// revision's, whole.
func TestReadyAnswersUnderGroupChanges(t *testing.T) {
	group := func(rev int) *domain.NodeGroup {
		return &domain.NodeGroup{ID: "web", MaxSize: int32(rev), AutoscalingOptions: &domain.PartialOptions{ScaleDownUnneeded: new(time.Duration(rev) * time.Minute)}}
	}
	srv, rm := newServer(t, group(1))
	ctx := context.Background()
	done := make(chan struct{})
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			req := &pb.NodeGroupAutoscalingOptionsRequest{Id: "web", Defaults: caDefaults}
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				o, err := srv.NodeGroupGetOptions(ctx, req)
				if err != nil {
					errs <- err
					return
				}
				if d := o.GetNodeGroupAutoscalingOptions(); time.Duration(d.GetScaleDownUnneededTime().GetDuration()) != d.GetScaleDownUnneededDuration().AsDuration() {
					errs <- fmt.Errorf("an answer mixes revisions: %v", d)
					return
				}
			}
		}()
	}
	for rev := 2; rev <= 200; rev++ {
		rm.PutGroup("web", uint64(rev), group(rev))
	}
	close(done)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	o, err := srv.NodeGroupGetOptions(ctx, &pb.NodeGroupAutoscalingOptionsRequest{Id: "web", Defaults: caDefaults})
	if err != nil || o.GetNodeGroupAutoscalingOptions().GetScaleDownUnneededDuration().AsDuration() != 200*time.Minute {
		t.Errorf("after the last change: %v, %v; want 200m", o, err)
	}
}
