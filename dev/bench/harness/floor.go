package harness

import (
	"context"
	"fmt"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
)

// FloorServer is the least a CloudProvider server can do: every RPC of
// CA's loop answered from maps and messages built at start, no
// interceptors, no read model, no lifecycle behind DeleteNodes. CA's loop
// against it is the floor of what gRPC on this machine allows.
type FloorServer struct {
	pb.UnimplementedCloudProviderServer
	groups    *pb.NodeGroupsResponse
	byPID     map[string]*pb.NodeGroupForNodeResponse
	unmanaged *pb.NodeGroupForNodeResponse
	options   map[string]*pb.NodeGroupAutoscalingOptionsResponse
	templates map[string]*pb.NodeGroupTemplateNodeInfoResponse
	instances map[string]*pb.NodeGroupNodesResponse
	groupOf   map[string]string // providerID -> group
	// mu guards targets: DeleteNodes arrive in parallel.
	mu      sync.RWMutex
	targets map[string]int32
	srv     *grpc.Server
	// Addr is the listening address.
	Addr string
}

// StartFloor serves the seeded state on addr ("127.0.0.1:0": any port),
// with gRPC's defaults plus opts.
func StartFloor(s *Seeded, addr string, opts ...grpc.ServerOption) (*FloorServer, error) {
	f := &FloorServer{
		groups: &pb.NodeGroupsResponse{}, byPID: map[string]*pb.NodeGroupForNodeResponse{},
		unmanaged: &pb.NodeGroupForNodeResponse{NodeGroup: &pb.NodeGroup{}},
		options:   map[string]*pb.NodeGroupAutoscalingOptionsResponse{}, templates: map[string]*pb.NodeGroupTemplateNodeInfoResponse{},
		instances: map[string]*pb.NodeGroupNodesResponse{}, groupOf: map[string]string{}, targets: map[string]int32{},
	}
	byID := map[string]*pb.NodeGroupForNodeResponse{}
	for _, g := range s.Groups {
		id := g.GetId()
		ng := &pb.NodeGroup{Id: id, MinSize: g.GetMinSize(), MaxSize: g.GetMaxSize(), Debug: fmt.Sprintf("%s (%d..%d)", id, g.GetMinSize(), g.GetMaxSize())}
		f.groups.NodeGroups = append(f.groups.NodeGroups, ng)
		byID[id] = &pb.NodeGroupForNodeResponse{NodeGroup: ng}
		f.targets[id] = g.GetTargetSize()
		f.options[id] = &pb.NodeGroupAutoscalingOptionsResponse{NodeGroupAutoscalingOptions: ExpectedOptions(g)}
		b, err := floorTemplateNode(g).Marshal()
		if err != nil {
			return nil, fmt.Errorf("template node of %s: %w", id, err)
		}
		f.templates[id] = &pb.NodeGroupTemplateNodeInfoResponse{NodeBytes: b, NodeInfo: b}
		f.instances[id] = &pb.NodeGroupNodesResponse{}
	}
	running := &pb.InstanceStatus{InstanceState: pb.InstanceStatus_instanceRunning}
	for _, in := range s.Instances {
		f.byPID[in.GetProviderId()] = byID[in.GetGroup()]
		f.groupOf[in.GetProviderId()] = in.GetGroup()
		r := f.instances[in.GetGroup()]
		r.Instances = append(r.Instances, &pb.Instance{Id: in.GetProviderId(), Status: running})
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	f.Addr = l.Addr().String()
	f.srv = grpc.NewServer(opts...)
	pb.RegisterCloudProviderServer(f.srv, f)
	go func() { _ = f.srv.Serve(l) }()
	return f, nil
}

// floorTemplateNode is a v1.Node of the size and shape of a template
// node: the group's node template labels, capacity and allocatable.
func floorTemplateNode(g *statev1.NodeGroup) *corev1.Node {
	nt := g.GetNodeTemplate()
	labels := map[string]string{corev1.LabelHostname: "template-" + g.GetId(), corev1.LabelArchStable: "amd64", corev1.LabelOSStable: "linux"}
	for k, v := range nt.GetLabels() {
		labels[k] = v
	}
	list := func(m map[string]string) corev1.ResourceList {
		out := corev1.ResourceList{}
		for k, v := range m {
			out[corev1.ResourceName(k)] = resource.MustParse(v)
		}
		return out
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "template-" + g.GetId(), Labels: labels},
		Status: corev1.NodeStatus{
			Capacity: list(nt.GetCapacity()), Allocatable: list(nt.GetAllocatable()), Phase: corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

// Stop stops the server.
func (f *FloorServer) Stop() { f.srv.Stop() }

// Refresh implements pb.CloudProviderServer.
func (f *FloorServer) Refresh(context.Context, *pb.RefreshRequest) (*pb.RefreshResponse, error) {
	return &pb.RefreshResponse{}, nil
}

// NodeGroups implements pb.CloudProviderServer.
func (f *FloorServer) NodeGroups(context.Context, *pb.NodeGroupsRequest) (*pb.NodeGroupsResponse, error) {
	return f.groups, nil
}

// NodeGroupForNode implements pb.CloudProviderServer.
func (f *FloorServer) NodeGroupForNode(_ context.Context, r *pb.NodeGroupForNodeRequest) (*pb.NodeGroupForNodeResponse, error) {
	if res, ok := f.byPID[r.GetNode().GetProviderID()]; ok {
		return res, nil
	}
	return f.unmanaged, nil
}

// NodeGroupTargetSize implements pb.CloudProviderServer.
func (f *FloorServer) NodeGroupTargetSize(_ context.Context, r *pb.NodeGroupTargetSizeRequest) (*pb.NodeGroupTargetSizeResponse, error) {
	f.mu.RLock()
	t, ok := f.targets[r.GetId()]
	f.mu.RUnlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "node group %q not found", r.GetId())
	}
	return &pb.NodeGroupTargetSizeResponse{TargetSize: t}, nil
}

// NodeGroupGetOptions implements pb.CloudProviderServer: the answer to
// CA's defaults, prebuilt per group.
func (f *FloorServer) NodeGroupGetOptions(_ context.Context, r *pb.NodeGroupAutoscalingOptionsRequest) (*pb.NodeGroupAutoscalingOptionsResponse, error) {
	res, ok := f.options[r.GetId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "node group %q not found", r.GetId())
	}
	return res, nil
}

// NodeGroupTemplateNodeInfo implements pb.CloudProviderServer.
func (f *FloorServer) NodeGroupTemplateNodeInfo(_ context.Context, r *pb.NodeGroupTemplateNodeInfoRequest) (*pb.NodeGroupTemplateNodeInfoResponse, error) {
	res, ok := f.templates[r.GetId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "node group %q not found", r.GetId())
	}
	return res, nil
}

// NodeGroupNodes implements pb.CloudProviderServer: the seeded instances,
// all running (a deleted node stays listed: the floor does not delete).
func (f *FloorServer) NodeGroupNodes(_ context.Context, r *pb.NodeGroupNodesRequest) (*pb.NodeGroupNodesResponse, error) {
	res, ok := f.instances[r.GetId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "node group %q not found", r.GetId())
	}
	return res, nil
}

// NodeGroupDeleteNodes implements pb.CloudProviderServer: the target
// shrinks by the nodes of the group, nothing else happens.
func (f *FloorServer) NodeGroupDeleteNodes(_ context.Context, r *pb.NodeGroupDeleteNodesRequest) (*pb.NodeGroupDeleteNodesResponse, error) {
	for _, n := range r.GetNodes() {
		if f.groupOf[n.GetProviderID()] != r.GetId() {
			return nil, status.Errorf(codes.InvalidArgument, "node %s is not in group %q", n.GetProviderID(), r.GetId())
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.targets[r.GetId()]; !ok {
		return nil, status.Errorf(codes.NotFound, "node group %q not found", r.GetId())
	}
	f.targets[r.GetId()] -= int32(len(r.GetNodes()))
	return &pb.NodeGroupDeleteNodesResponse{}, nil
}
