// Package grpcapi is Cluster Autoscaler's externalgrpc CloudProvider
// service. It reads and writes both generations of the wire contract
// (CA 1.29-1.34 legacy fields and CA >= 1.35 fields) and answers every read
// from the in-memory read model.
package grpcapi

import (
	"context"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// Server implements pb.CloudProviderServer on an app.Service.
type Server struct {
	pb.UnimplementedCloudProviderServer
	svc *app.Service
	// answers are the ready answers per group (answers.go).
	answers answers
}

var _ pb.CloudProviderServer = (*Server)(nil)

// NewServer returns a Server.
func NewServer(svc *app.Service) *Server {
	s := &Server{svc: svc}
	s.answers.exists = func(id string) bool {
		_, ok := svc.ReadModel().Group(id)
		return ok
	}
	return s
}

// toStatus converts an application error into a gRPC status error.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	code := domain.CodeOf(err)
	if code == contract.CodeUnknown {
		return status.Error(codes.Internal, err.Error())
	}
	return status.Error(codes.Code(code), domain.MessageOf(err))
}

func nodeGroup(g app.GroupView) *pb.NodeGroup {
	return &pb.NodeGroup{Id: g.Record.ID, MinSize: g.Record.MinSize, MaxSize: g.Record.MaxSize, Debug: g.Debug}
}

func nodeRef(n *pb.ExternalGrpcNode) app.NodeRef {
	return app.NodeRef{ProviderID: n.GetProviderID(), Name: n.GetName(), Labels: n.GetLabels(), Annotations: n.GetAnnotations()}
}

// NodeGroups implements pb.CloudProviderServer.
func (s *Server) NodeGroups(context.Context, *pb.NodeGroupsRequest) (*pb.NodeGroupsResponse, error) {
	groups, err := s.svc.NodeGroups()
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pb.NodeGroupsResponse{NodeGroups: make([]*pb.NodeGroup, len(groups))}
	for i, g := range groups {
		resp.NodeGroups[i] = nodeGroup(g)
	}
	return resp, nil
}

// NodeGroupForNode implements pb.CloudProviderServer. An unmanaged node
// gets a NodeGroup with an empty id, which CA reads as "not ours".
func (s *Server) NodeGroupForNode(_ context.Context, req *pb.NodeGroupForNodeRequest) (*pb.NodeGroupForNodeResponse, error) {
	if req.GetNode() == nil {
		return nil, status.Error(codes.InvalidArgument, "node is required")
	}
	g, found, err := s.svc.GroupForNode(nodeRef(req.GetNode()))
	if err != nil {
		return nil, toStatus(err)
	}
	if !found {
		return unmanagedAnswer, nil
	}
	return s.answers.of(g).forNode, nil
}

// PricingNodePrice implements pb.CloudProviderServer.
func (s *Server) PricingNodePrice(_ context.Context, req *pb.PricingNodePriceRequest) (*pb.PricingNodePriceResponse, error) {
	if req.GetNode() == nil {
		return nil, status.Error(codes.InvalidArgument, "node is required")
	}
	start, err := pickTime(req.GetStartTimestamp(), req.GetStartTime())
	if err != nil {
		return nil, toStatus(err)
	}
	end, err := pickTime(req.GetEndTimestamp(), req.GetEndTime())
	if err != nil {
		return nil, toStatus(err)
	}
	price, err := s.svc.NodePrice(nodeRef(req.GetNode()), start, end)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.PricingNodePriceResponse{Price: price}, nil
}

// PricingPodPrice implements pb.CloudProviderServer.
func (s *Server) PricingPodPrice(_ context.Context, req *pb.PricingPodPriceRequest) (*pb.PricingPodPriceResponse, error) {
	raw := req.GetPodBytes()
	if len(raw) == 0 {
		raw = req.GetPod()
	}
	if len(raw) == 0 {
		return nil, status.Error(codes.InvalidArgument, "pod is required (pod_bytes or the legacy pod field)")
	}
	var pod corev1.Pod
	if err := pod.Unmarshal(raw); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "decoding pod: %v", err)
	}
	start, err := pickTime(req.GetStartTimestamp(), req.GetStartTime())
	if err != nil {
		return nil, toStatus(err)
	}
	end, err := pickTime(req.GetEndTimestamp(), req.GetEndTime())
	if err != nil {
		return nil, toStatus(err)
	}
	price, err := s.svc.PodPrice(PodMilliCPU(&pod), start, end)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.PricingPodPriceResponse{Price: price}, nil
}

// pickTime reads one instant from either wire generation: the current
// Timestamp when set, else the legacy meta.v1.Time. Absent is the zero
// time (the pricing rules reject it).
func pickTime(cur *timestamppb.Timestamp, legacy *pb.LegacyTime) (time.Time, error) {
	if cur != nil && (cur.GetSeconds() != 0 || cur.GetNanos() != 0) {
		if err := cur.CheckValid(); err != nil {
			return time.Time{}, domain.Errorf(contract.CodeInvalidArgument, "invalid timestamp: %v", err)
		}
		return cur.AsTime(), nil
	}
	if legacy != nil && (legacy.GetSeconds() != 0 || legacy.GetNanos() != 0) {
		ts := &timestamppb.Timestamp{Seconds: legacy.GetSeconds(), Nanos: legacy.GetNanos()}
		if err := ts.CheckValid(); err != nil {
			return time.Time{}, domain.Errorf(contract.CodeInvalidArgument, "invalid legacy time: %v", err)
		}
		return ts.AsTime(), nil
	}
	return time.Time{}, nil
}

// GPULabel implements pb.CloudProviderServer.
func (s *Server) GPULabel(context.Context, *pb.GPULabelRequest) (*pb.GPULabelResponse, error) {
	return &pb.GPULabelResponse{Label: s.svc.GPULabel()}, nil
}

// GetAvailableGPUTypes implements pb.CloudProviderServer. CA uses the
// keys only; values are empty.
func (s *Server) GetAvailableGPUTypes(context.Context, *pb.GetAvailableGPUTypesRequest) (*pb.GetAvailableGPUTypesResponse, error) {
	types, err := s.svc.GPUTypes()
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pb.GetAvailableGPUTypesResponse{GpuTypes: make(map[string]*anypb.Any, len(types))}
	for _, t := range types {
		resp.GpuTypes[t] = &anypb.Any{}
	}
	return resp, nil
}

// Cleanup implements pb.CloudProviderServer: nothing is held per client.
func (s *Server) Cleanup(context.Context, *pb.CleanupRequest) (*pb.CleanupResponse, error) {
	return &pb.CleanupResponse{}, nil
}

// Refresh implements pb.CloudProviderServer. The read model is always
// current, so there is nothing to refresh; it fails only before the model
// has loaded.
func (s *Server) Refresh(context.Context, *pb.RefreshRequest) (*pb.RefreshResponse, error) {
	if err := s.svc.Refresh(); err != nil {
		return nil, toStatus(err)
	}
	return &pb.RefreshResponse{}, nil
}

// NodeGroupTargetSize implements pb.CloudProviderServer.
func (s *Server) NodeGroupTargetSize(_ context.Context, req *pb.NodeGroupTargetSizeRequest) (*pb.NodeGroupTargetSizeResponse, error) {
	n, err := s.svc.TargetSize(req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.NodeGroupTargetSizeResponse{TargetSize: n}, nil
}

// NodeGroupIncreaseSize implements pb.CloudProviderServer.
func (s *Server) NodeGroupIncreaseSize(ctx context.Context, req *pb.NodeGroupIncreaseSizeRequest) (*pb.NodeGroupIncreaseSizeResponse, error) {
	if err := s.svc.IncreaseSize(ctx, req.GetId(), req.GetDelta()); err != nil {
		return nil, toStatus(err)
	}
	return &pb.NodeGroupIncreaseSizeResponse{}, nil
}

// NodeGroupDeleteNodes implements pb.CloudProviderServer.
func (s *Server) NodeGroupDeleteNodes(ctx context.Context, req *pb.NodeGroupDeleteNodesRequest) (*pb.NodeGroupDeleteNodesResponse, error) {
	nodes := make([]app.NodeRef, len(req.GetNodes()))
	for i, n := range req.GetNodes() {
		nodes[i] = nodeRef(n)
	}
	if err := s.svc.DeleteNodes(ctx, req.GetId(), nodes); err != nil {
		return nil, toStatus(err)
	}
	return &pb.NodeGroupDeleteNodesResponse{}, nil
}

// NodeGroupDecreaseTargetSize implements pb.CloudProviderServer.
func (s *Server) NodeGroupDecreaseTargetSize(ctx context.Context, req *pb.NodeGroupDecreaseTargetSizeRequest) (*pb.NodeGroupDecreaseTargetSizeResponse, error) {
	if err := s.svc.DecreaseTargetSize(ctx, req.GetId(), req.GetDelta()); err != nil {
		return nil, toStatus(err)
	}
	return &pb.NodeGroupDecreaseTargetSizeResponse{}, nil
}

var caStates = map[domain.CAState]pb.InstanceStatus_InstanceState{
	domain.CAStateRunning:  pb.InstanceStatus_instanceRunning,
	domain.CAStateCreating: pb.InstanceStatus_instanceCreating,
	domain.CAStateDeleting: pb.InstanceStatus_instanceDeleting,
}

// NodeGroupNodes implements pb.CloudProviderServer.
func (s *Server) NodeGroupNodes(_ context.Context, req *pb.NodeGroupNodesRequest) (*pb.NodeGroupNodesResponse, error) {
	insts, err := s.svc.Nodes(req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pb.NodeGroupNodesResponse{Instances: make([]*pb.Instance, len(insts))}
	for i, in := range insts {
		st := &pb.InstanceStatus{InstanceState: caStates[in.State]}
		if in.ErrorCode != "" {
			st.ErrorInfo = &pb.InstanceErrorInfo{ErrorCode: in.ErrorCode, ErrorMessage: in.ErrorMessage, InstanceErrorClass: in.ErrorClass}
		}
		resp.Instances[i] = &pb.Instance{Id: in.ID, Status: st}
	}
	return resp, nil
}

// NodeGroupTemplateNodeInfo implements pb.CloudProviderServer: the
// group's template node (TemplateNode), built once per revision.
func (s *Server) NodeGroupTemplateNodeInfo(_ context.Context, req *pb.NodeGroupTemplateNodeInfoRequest) (*pb.NodeGroupTemplateNodeInfoResponse, error) {
	g, err := s.svc.Group(req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return s.answers.of(g).template()
}

// NodeGroupGetOptions implements pb.CloudProviderServer: CA's defaults
// (read from either generation) overridden by the group's options, every
// field written in both generations; built once per revision of the group
// and set of defaults.
func (s *Server) NodeGroupGetOptions(_ context.Context, req *pb.NodeGroupAutoscalingOptionsRequest) (*pb.NodeGroupAutoscalingOptionsResponse, error) {
	g, err := s.svc.Group(req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return s.answers.of(g).getOptions(g, req.GetDefaults())
}

// DecodeDefaults reads CA's defaults. An absent or empty message gives
// nothing; otherwise the scalars are taken as sent (proto3 cannot tell a
// zero from an absent value, and CA always sends all of them) and each
// duration from the generation domain.PickDuration prefers.
func DecodeDefaults(d *pb.NodeGroupAutoscalingOptions) domain.PartialOptions {
	if d == nil || proto.Size(d) == 0 {
		return domain.PartialOptions{}
	}
	cur := func(x *durationpb.Duration) *time.Duration {
		if x == nil || x.CheckValid() != nil {
			return nil
		}
		v := x.AsDuration()
		return &v
	}
	leg := func(x *pb.LegacyDuration) *time.Duration {
		if x == nil {
			return nil
		}
		v := time.Duration(x.GetDuration())
		return &v
	}
	util, gpuUtil := d.GetScaleDownUtilizationThreshold(), d.GetScaleDownGpuUtilizationThreshold()
	zeroOrMax, ignoreDS := d.GetZeroOrMaxNodeScaling(), d.GetIgnoreDaemonSetsUtilization()
	return domain.PartialOptions{
		ScaleDownUtilizationThreshold:    &util,
		ScaleDownGPUUtilizationThreshold: &gpuUtil,
		ZeroOrMaxNodeScaling:             &zeroOrMax,
		IgnoreDaemonSetsUtilization:      &ignoreDS,
		ScaleDownUnneeded:                domain.PickDuration(cur(d.GetScaleDownUnneededDuration()), leg(d.GetScaleDownUnneededTime())),
		ScaleDownUnready:                 domain.PickDuration(cur(d.GetScaleDownUnreadyDuration()), leg(d.GetScaleDownUnreadyTime())),
		MaxNodeProvision:                 domain.PickDuration(cur(d.GetMaxNodeProvisionDuration()), leg(d.GetMaxNodeProvisionTime())),
	}
}

// EncodeOptions writes every field, durations in both generations.
func EncodeOptions(o domain.Options) *pb.NodeGroupAutoscalingOptions {
	return &pb.NodeGroupAutoscalingOptions{
		ScaleDownUtilizationThreshold:    o.ScaleDownUtilizationThreshold,
		ScaleDownGpuUtilizationThreshold: o.ScaleDownGPUUtilizationThreshold,
		ZeroOrMaxNodeScaling:             o.ZeroOrMaxNodeScaling,
		IgnoreDaemonSetsUtilization:      o.IgnoreDaemonSetsUtilization,
		ScaleDownUnneededTime:            &pb.LegacyDuration{Duration: int64(o.ScaleDownUnneeded)},
		ScaleDownUnreadyTime:             &pb.LegacyDuration{Duration: int64(o.ScaleDownUnready)},
		MaxNodeProvisionTime:             &pb.LegacyDuration{Duration: int64(o.MaxNodeProvision)},
		ScaleDownUnneededDuration:        durationpb.New(o.ScaleDownUnneeded),
		ScaleDownUnreadyDuration:         durationpb.New(o.ScaleDownUnready),
		MaxNodeProvisionDuration:         durationpb.New(o.MaxNodeProvision),
	}
}
