package harness

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
)

// FloorServer is the least a CloudProvider server can do: the same
// messages answered from prebuilt maps, no interceptors, no read model,
// no locks. The CA loop against it is the floor of what gRPC on this
// machine allows.
type FloorServer struct {
	pb.UnimplementedCloudProviderServer
	groups  []*pb.NodeGroup
	byID    map[string]*pb.NodeGroup
	byPID   map[string]*pb.NodeGroup
	targets map[string]int32
	srv     *grpc.Server
	// Addr is the listening address.
	Addr string
}

// StartFloor serves the seeded state on addr ("127.0.0.1:0": any port).
func StartFloor(s *Seeded, addr string) (*FloorServer, error) {
	f := &FloorServer{byID: map[string]*pb.NodeGroup{}, byPID: map[string]*pb.NodeGroup{}, targets: map[string]int32{}}
	for _, g := range s.Groups {
		ng := &pb.NodeGroup{Id: g.GetId(), MinSize: g.GetMinSize(), MaxSize: g.GetMaxSize(), Debug: fmt.Sprintf("%s (%d..%d)", g.GetId(), g.GetMinSize(), g.GetMaxSize())}
		f.groups = append(f.groups, ng)
		f.byID[ng.GetId()] = ng
		f.targets[ng.GetId()] = g.GetTargetSize()
	}
	for _, in := range s.Instances {
		f.byPID[in.GetProviderId()] = f.byID[in.GetGroup()]
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	f.Addr = l.Addr().String()
	f.srv = grpc.NewServer()
	pb.RegisterCloudProviderServer(f.srv, f)
	go func() { _ = f.srv.Serve(l) }()
	return f, nil
}

// Stop stops the server.
func (f *FloorServer) Stop() { f.srv.Stop() }

// Refresh implements pb.CloudProviderServer.
func (f *FloorServer) Refresh(context.Context, *pb.RefreshRequest) (*pb.RefreshResponse, error) {
	return &pb.RefreshResponse{}, nil
}

// NodeGroups implements pb.CloudProviderServer.
func (f *FloorServer) NodeGroups(context.Context, *pb.NodeGroupsRequest) (*pb.NodeGroupsResponse, error) {
	return &pb.NodeGroupsResponse{NodeGroups: f.groups}, nil
}

// NodeGroupForNode implements pb.CloudProviderServer.
func (f *FloorServer) NodeGroupForNode(_ context.Context, r *pb.NodeGroupForNodeRequest) (*pb.NodeGroupForNodeResponse, error) {
	if g, ok := f.byPID[r.GetNode().GetProviderID()]; ok {
		return &pb.NodeGroupForNodeResponse{NodeGroup: g}, nil
	}
	return &pb.NodeGroupForNodeResponse{NodeGroup: &pb.NodeGroup{}}, nil
}

// NodeGroupTargetSize implements pb.CloudProviderServer.
func (f *FloorServer) NodeGroupTargetSize(_ context.Context, r *pb.NodeGroupTargetSizeRequest) (*pb.NodeGroupTargetSizeResponse, error) {
	t, ok := f.targets[r.GetId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "node group %q not found", r.GetId())
	}
	return &pb.NodeGroupTargetSizeResponse{TargetSize: t}, nil
}

// NodeGroupGetOptions implements pb.CloudProviderServer.
func (f *FloorServer) NodeGroupGetOptions(_ context.Context, r *pb.NodeGroupAutoscalingOptionsRequest) (*pb.NodeGroupAutoscalingOptionsResponse, error) {
	return &pb.NodeGroupAutoscalingOptionsResponse{NodeGroupAutoscalingOptions: r.GetDefaults()}, nil
}
