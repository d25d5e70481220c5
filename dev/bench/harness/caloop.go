package harness

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
)

// CA-loop RPC names, as recorded by CALoop.
const (
	RPCRefresh          = "Refresh"
	RPCNodeGroups       = "NodeGroups"
	RPCNodeGroupForNode = "NodeGroupForNode"
	RPCTargetSize       = "NodeGroupTargetSize"
	RPCGetOptions       = "NodeGroupGetOptions"
)

// CALoop is what Cluster Autoscaler's externalgrpc cloud provider does
// against the provider in one autoscaling loop, serially as CA does (its
// client holds one lock per call) and with CA's 5s per-call deadline.
type CALoop struct {
	c pb.CloudProviderClient
	// Latencies are every call's latency by RPC, across loops.
	Latencies map[string][]time.Duration
	// Loops are whole-loop times.
	Loops []time.Duration
}

// Dial connects like CA's client (plaintext on loopback here).
func Dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// NewCALoop returns a loop over conn.
func NewCALoop(conn *grpc.ClientConn) *CALoop {
	return &CALoop{c: pb.NewCloudProviderClient(conn), Latencies: map[string][]time.Duration{}}
}

// caDefaults are the autoscaling defaults CA sends with GetOptions.
var caDefaults = &pb.NodeGroupAutoscalingOptions{
	ScaleDownUtilizationThreshold: 0.5, ScaleDownGpuUtilizationThreshold: 0.5,
	ScaleDownUnneededDuration: durationpb.New(10 * time.Minute), ScaleDownUnreadyDuration: durationpb.New(20 * time.Minute),
	MaxNodeProvisionDuration: durationpb.New(15 * time.Minute),
}

func timed[T any](l *CALoop, rpc string, f func(ctx context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	v, err := f(ctx)
	l.Latencies[rpc] = append(l.Latencies[rpc], time.Since(start))
	if err != nil {
		var zero T
		return zero, fmt.Errorf("%s: %w", rpc, err)
	}
	return v, nil
}

// Run runs one loop over the cluster's nodes. want, when not nil, is the
// group each node must resolve to; a wrong answer is an error (the
// benchmark must measure correct answers).
func (l *CALoop) Run(nodes []*pb.ExternalGrpcNode, want []string) error {
	start := time.Now()
	if _, err := timed(l, RPCRefresh, func(ctx context.Context) (*pb.RefreshResponse, error) {
		return l.c.Refresh(ctx, &pb.RefreshRequest{})
	}); err != nil {
		return err
	}
	groups, err := timed(l, RPCNodeGroups, func(ctx context.Context) (*pb.NodeGroupsResponse, error) {
		return l.c.NodeGroups(ctx, &pb.NodeGroupsRequest{})
	})
	if err != nil {
		return err
	}
	for i, n := range nodes {
		res, err := timed(l, RPCNodeGroupForNode, func(ctx context.Context) (*pb.NodeGroupForNodeResponse, error) {
			return l.c.NodeGroupForNode(ctx, &pb.NodeGroupForNodeRequest{Node: n})
		})
		if err != nil {
			return err
		}
		if want != nil && res.GetNodeGroup().GetId() != want[i] {
			return fmt.Errorf("NodeGroupForNode(%s) = %q, want %q", n.GetProviderID(), res.GetNodeGroup().GetId(), want[i])
		}
	}
	for _, g := range groups.GetNodeGroups() {
		if _, err := timed(l, RPCTargetSize, func(ctx context.Context) (*pb.NodeGroupTargetSizeResponse, error) {
			return l.c.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: g.GetId()})
		}); err != nil {
			return err
		}
		if _, err := timed(l, RPCGetOptions, func(ctx context.Context) (*pb.NodeGroupAutoscalingOptionsResponse, error) {
			return l.c.NodeGroupGetOptions(ctx, &pb.NodeGroupAutoscalingOptionsRequest{Id: g.GetId(), Defaults: caDefaults})
		}); err != nil {
			return err
		}
	}
	l.Loops = append(l.Loops, time.Since(start))
	return nil
}

// Reset forgets recorded latencies and loop times (after a warm-up loop).
func (l *CALoop) Reset() {
	l.Latencies = map[string][]time.Duration{}
	l.Loops = nil
}
