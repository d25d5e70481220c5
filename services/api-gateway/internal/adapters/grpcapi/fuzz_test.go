package grpcapi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// rpc decodes raw bytes as one method's request and calls the handler.
type rpc struct {
	name string
	seed proto.Message
	call func(ctx context.Context, raw []byte) error
}

func rpcs(srv pb.CloudProviderServer) []rpc {
	mk := func(name string, seed proto.Message, newReq func() proto.Message, h func(context.Context, proto.Message) error) rpc {
		return rpc{name: name, seed: seed, call: func(ctx context.Context, raw []byte) error {
			req := newReq()
			if err := proto.Unmarshal(raw, req); err != nil {
				return fmt.Errorf("undecodable request (gRPC rejects it before any handler runs): %w", err)
			}
			return h(ctx, req)
		}}
	}
	node := &pb.ExternalGrpcNode{ProviderID: "nodesmith:///g/i-1", Name: "n", Labels: map[string]string{"a": "b"}}
	ts := timestamppb.New(time.Unix(1_700_000_000, 0))
	return []rpc{
		mk("NodeGroups", &pb.NodeGroupsRequest{}, func() proto.Message { return &pb.NodeGroupsRequest{} },
			func(ctx context.Context, m proto.Message) error {
				_, err := srv.NodeGroups(ctx, m.(*pb.NodeGroupsRequest))
				return err
			}),
		mk("NodeGroupForNode", &pb.NodeGroupForNodeRequest{Node: node}, func() proto.Message { return &pb.NodeGroupForNodeRequest{} },
			func(ctx context.Context, m proto.Message) error {
				_, err := srv.NodeGroupForNode(ctx, m.(*pb.NodeGroupForNodeRequest))
				return err
			}),
		mk("PricingNodePrice", &pb.PricingNodePriceRequest{Node: node, StartTimestamp: ts, EndTime: &pb.LegacyTime{Seconds: 1_700_003_600}},
			func() proto.Message { return &pb.PricingNodePriceRequest{} },
			func(ctx context.Context, m proto.Message) error {
				_, err := srv.PricingNodePrice(ctx, m.(*pb.PricingNodePriceRequest))
				return err
			}),
		mk("PricingPodPrice", &pb.PricingPodPriceRequest{PodBytes: []byte{0x0a, 0x03, 0x0a, 0x01, 0x70}, StartTimestamp: ts, EndTimestamp: ts},
			func() proto.Message { return &pb.PricingPodPriceRequest{} },
			func(ctx context.Context, m proto.Message) error {
				_, err := srv.PricingPodPrice(ctx, m.(*pb.PricingPodPriceRequest))
				return err
			}),
		mk("NodeGroupTargetSize", &pb.NodeGroupTargetSizeRequest{Id: "g"}, func() proto.Message { return &pb.NodeGroupTargetSizeRequest{} },
			func(ctx context.Context, m proto.Message) error {
				_, err := srv.NodeGroupTargetSize(ctx, m.(*pb.NodeGroupTargetSizeRequest))
				return err
			}),
		mk("NodeGroupIncreaseSize", &pb.NodeGroupIncreaseSizeRequest{Id: "g", Delta: 1}, func() proto.Message { return &pb.NodeGroupIncreaseSizeRequest{} },
			func(ctx context.Context, m proto.Message) error {
				_, err := srv.NodeGroupIncreaseSize(ctx, m.(*pb.NodeGroupIncreaseSizeRequest))
				return err
			}),
		mk("NodeGroupDeleteNodes", &pb.NodeGroupDeleteNodesRequest{Id: "g", Nodes: []*pb.ExternalGrpcNode{node}}, func() proto.Message { return &pb.NodeGroupDeleteNodesRequest{} },
			func(ctx context.Context, m proto.Message) error {
				_, err := srv.NodeGroupDeleteNodes(ctx, m.(*pb.NodeGroupDeleteNodesRequest))
				return err
			}),
		mk("NodeGroupDecreaseTargetSize", &pb.NodeGroupDecreaseTargetSizeRequest{Id: "g", Delta: -1}, func() proto.Message { return &pb.NodeGroupDecreaseTargetSizeRequest{} },
			func(ctx context.Context, m proto.Message) error {
				_, err := srv.NodeGroupDecreaseTargetSize(ctx, m.(*pb.NodeGroupDecreaseTargetSizeRequest))
				return err
			}),
		mk("NodeGroupNodes", &pb.NodeGroupNodesRequest{Id: "g"}, func() proto.Message { return &pb.NodeGroupNodesRequest{} },
			func(ctx context.Context, m proto.Message) error {
				_, err := srv.NodeGroupNodes(ctx, m.(*pb.NodeGroupNodesRequest))
				return err
			}),
		mk("NodeGroupTemplateNodeInfo", &pb.NodeGroupTemplateNodeInfoRequest{Id: "g"}, func() proto.Message { return &pb.NodeGroupTemplateNodeInfoRequest{} },
			func(ctx context.Context, m proto.Message) error {
				_, err := srv.NodeGroupTemplateNodeInfo(ctx, m.(*pb.NodeGroupTemplateNodeInfoRequest))
				return err
			}),
		mk("NodeGroupGetOptions", &pb.NodeGroupAutoscalingOptionsRequest{Id: "g", Defaults: &pb.NodeGroupAutoscalingOptions{
			MaxNodeProvisionTime: &pb.LegacyDuration{Duration: -5}, ScaleDownUnneededDuration: durationpb.New(time.Hour),
		}}, func() proto.Message { return &pb.NodeGroupAutoscalingOptionsRequest{} },
			func(ctx context.Context, m proto.Message) error {
				_, err := srv.NodeGroupGetOptions(ctx, m.(*pb.NodeGroupAutoscalingOptionsRequest))
				return err
			}),
	}
}

// FuzzCloudProviderRequests feeds arbitrary bytes to every handler as its
// request message. Handlers may return any error; they must not panic.
func FuzzCloudProviderRequests(f *testing.F) {
	g := fullGroup()
	g.ID = "g"
	srv, rm := newServer(f, g)
	rm.PutInstance("g.i-1", 1, &domain.Instance{ID: "i-1", Group: "g", State: domain.StateRunning, ProviderID: "nodesmith:///g/i-1"})
	calls := rpcs(srv)
	for i, c := range calls {
		raw, err := proto.Marshal(c.seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), raw)
	}
	f.Fuzz(func(t *testing.T, which uint8, raw []byte) {
		c := calls[int(which)%len(calls)]
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.call(ctx, raw)
	})
}
