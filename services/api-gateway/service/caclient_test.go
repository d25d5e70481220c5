package service_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
)

// caOptions are autoscaling options as CA holds them.
type caOptions struct {
	util, gpuUtil       float64
	zeroOrMax, ignoreDS bool
	unneeded, unready   time.Duration
	maxProvision        time.Duration
}

// caClient is what Cluster Autoscaler's externalgrpc client does, in one
// of the two wire generations. Like CA it holds one lock per call and
// gives every call a 5s deadline.
type caClient interface {
	Refresh(ctx context.Context) error
	Cleanup(ctx context.Context) error
	NodeGroups(ctx context.Context) ([]*pb.NodeGroup, error)
	NodeGroupForNode(ctx context.Context, n *pb.ExternalGrpcNode) (*pb.NodeGroup, error)
	TargetSize(ctx context.Context, id string) (int32, error)
	IncreaseSize(ctx context.Context, id string, delta int32) error
	DeleteNodes(ctx context.Context, id string, nodes []*pb.ExternalGrpcNode) error
	DecreaseTargetSize(ctx context.Context, id string, delta int32) error
	Nodes(ctx context.Context, id string) ([]*pb.Instance, error)
	// TemplateNodeInfo returns the node CA would use; the legacy client
	// also checks that field 1 and field 2 carry the same node.
	TemplateNodeInfo(ctx context.Context, id string) (*corev1.Node, error)
	// GetOptions sends defaults and returns the answer; both clients check
	// that the answer carries every duration in both generations, equal.
	GetOptions(ctx context.Context, id string, defaults caOptions) (caOptions, error)
	NodePrice(ctx context.Context, n *pb.ExternalGrpcNode, start, end time.Time) (float64, error)
	PodPrice(ctx context.Context, pod *corev1.Pod, start, end time.Time) (float64, error)
	GPULabel(ctx context.Context) (string, error)
	GPUTypes(ctx context.Context) ([]string, error)
}

const method = "/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/"

// caLock serialises calls like CA's client does.
type caLock struct{ mu sync.Mutex }

func (l *caLock) call(ctx context.Context, f func(ctx context.Context) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return f(ctx)
}

// ---- current generation (CA >= 1.35): the generated client ----

type currentClient struct {
	caLock
	c pb.CloudProviderClient
}

func newCurrentClient(conn *grpc.ClientConn) *currentClient {
	return &currentClient{c: pb.NewCloudProviderClient(conn)}
}

func (c *currentClient) Refresh(ctx context.Context) error {
	return c.call(ctx, func(ctx context.Context) error { _, err := c.c.Refresh(ctx, &pb.RefreshRequest{}); return err })
}

func (c *currentClient) Cleanup(ctx context.Context) error {
	return c.call(ctx, func(ctx context.Context) error { _, err := c.c.Cleanup(ctx, &pb.CleanupRequest{}); return err })
}

func (c *currentClient) NodeGroups(ctx context.Context) (out []*pb.NodeGroup, err error) {
	err = c.call(ctx, func(ctx context.Context) error {
		r, err := c.c.NodeGroups(ctx, &pb.NodeGroupsRequest{})
		out = r.GetNodeGroups()
		return err
	})
	return out, err
}

func (c *currentClient) NodeGroupForNode(ctx context.Context, n *pb.ExternalGrpcNode) (out *pb.NodeGroup, err error) {
	err = c.call(ctx, func(ctx context.Context) error {
		r, err := c.c.NodeGroupForNode(ctx, &pb.NodeGroupForNodeRequest{Node: n})
		out = r.GetNodeGroup()
		return err
	})
	return out, err
}

func (c *currentClient) TargetSize(ctx context.Context, id string) (out int32, err error) {
	err = c.call(ctx, func(ctx context.Context) error {
		r, err := c.c.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: id})
		out = r.GetTargetSize()
		return err
	})
	return out, err
}

func (c *currentClient) IncreaseSize(ctx context.Context, id string, delta int32) error {
	return c.call(ctx, func(ctx context.Context) error {
		_, err := c.c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: id, Delta: delta})
		return err
	})
}

func (c *currentClient) DeleteNodes(ctx context.Context, id string, nodes []*pb.ExternalGrpcNode) error {
	return c.call(ctx, func(ctx context.Context) error {
		_, err := c.c.NodeGroupDeleteNodes(ctx, &pb.NodeGroupDeleteNodesRequest{Id: id, Nodes: nodes})
		return err
	})
}

func (c *currentClient) DecreaseTargetSize(ctx context.Context, id string, delta int32) error {
	return c.call(ctx, func(ctx context.Context) error {
		_, err := c.c.NodeGroupDecreaseTargetSize(ctx, &pb.NodeGroupDecreaseTargetSizeRequest{Id: id, Delta: delta})
		return err
	})
}

func (c *currentClient) Nodes(ctx context.Context, id string) (out []*pb.Instance, err error) {
	err = c.call(ctx, func(ctx context.Context) error {
		r, err := c.c.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: id})
		out = r.GetInstances()
		return err
	})
	return out, err
}

func (c *currentClient) TemplateNodeInfo(ctx context.Context, id string) (out *corev1.Node, err error) {
	err = c.call(ctx, func(ctx context.Context) error {
		r, err := c.c.NodeGroupTemplateNodeInfo(ctx, &pb.NodeGroupTemplateNodeInfoRequest{Id: id})
		if err != nil {
			return err
		}
		out = &corev1.Node{}
		return out.Unmarshal(r.GetNodeBytes())
	})
	return out, err
}

func (c *currentClient) GetOptions(ctx context.Context, id string, d caOptions) (out caOptions, err error) {
	err = c.call(ctx, func(ctx context.Context) error {
		r, err := c.c.NodeGroupGetOptions(ctx, &pb.NodeGroupAutoscalingOptionsRequest{Id: id, Defaults: &pb.NodeGroupAutoscalingOptions{
			ScaleDownUtilizationThreshold: d.util, ScaleDownGpuUtilizationThreshold: d.gpuUtil,
			ZeroOrMaxNodeScaling: d.zeroOrMax, IgnoreDaemonSetsUtilization: d.ignoreDS,
			ScaleDownUnneededDuration: durationpb.New(d.unneeded), ScaleDownUnreadyDuration: durationpb.New(d.unready),
			MaxNodeProvisionDuration: durationpb.New(d.maxProvision),
		}})
		if err != nil {
			return err
		}
		o := r.GetNodeGroupAutoscalingOptions()
		out = caOptions{
			util: o.GetScaleDownUtilizationThreshold(), gpuUtil: o.GetScaleDownGpuUtilizationThreshold(),
			zeroOrMax: o.GetZeroOrMaxNodeScaling(), ignoreDS: o.GetIgnoreDaemonSetsUtilization(),
			unneeded: o.GetScaleDownUnneededDuration().AsDuration(), unready: o.GetScaleDownUnreadyDuration().AsDuration(),
			maxProvision: o.GetMaxNodeProvisionDuration().AsDuration(),
		}
		for _, pair := range [][2]time.Duration{
			{out.unneeded, time.Duration(o.GetScaleDownUnneededTime().GetDuration())},
			{out.unready, time.Duration(o.GetScaleDownUnreadyTime().GetDuration())},
			{out.maxProvision, time.Duration(o.GetMaxNodeProvisionTime().GetDuration())},
		} {
			if o.GetScaleDownUnneededTime() == nil || o.GetScaleDownUnreadyTime() == nil || o.GetMaxNodeProvisionTime() == nil || pair[0] != pair[1] {
				return fmt.Errorf("legacy durations missing or different from current ones: %v", o)
			}
		}
		return nil
	})
	return out, err
}

func (c *currentClient) NodePrice(ctx context.Context, n *pb.ExternalGrpcNode, start, end time.Time) (out float64, err error) {
	err = c.call(ctx, func(ctx context.Context) error {
		r, err := c.c.PricingNodePrice(ctx, &pb.PricingNodePriceRequest{Node: n, StartTimestamp: timestamppb.New(start), EndTimestamp: timestamppb.New(end)})
		out = r.GetPrice()
		return err
	})
	return out, err
}

func (c *currentClient) PodPrice(ctx context.Context, pod *corev1.Pod, start, end time.Time) (out float64, err error) {
	raw, err := pod.Marshal()
	if err != nil {
		return 0, err
	}
	err = c.call(ctx, func(ctx context.Context) error {
		r, err := c.c.PricingPodPrice(ctx, &pb.PricingPodPriceRequest{PodBytes: raw, StartTimestamp: timestamppb.New(start), EndTimestamp: timestamppb.New(end)})
		out = r.GetPrice()
		return err
	})
	return out, err
}

func (c *currentClient) GPULabel(ctx context.Context) (out string, err error) {
	err = c.call(ctx, func(ctx context.Context) error {
		r, err := c.c.GPULabel(ctx, &pb.GPULabelRequest{})
		out = r.GetLabel()
		return err
	})
	return out, err
}

func (c *currentClient) GPUTypes(ctx context.Context) (out []string, err error) {
	err = c.call(ctx, func(ctx context.Context) error {
		r, err := c.c.GetAvailableGPUTypes(ctx, &pb.GetAvailableGPUTypesRequest{})
		for k := range r.GetGpuTypes() {
			out = append(out, k)
		}
		return err
	})
	return out, err
}

// ---- legacy generation (CA 1.29-1.34): every request encoded by hand ----

// rawCodec passes bytes through, so requests and responses are exactly
// the bytes the test builds and reads.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// wire builds a protobuf message field by field.
type wire []byte

func (w wire) str(n protowire.Number, s string) wire {
	w = protowire.AppendTag(w, n, protowire.BytesType)
	return protowire.AppendString(w, s)
}

func (w wire) bytes(n protowire.Number, b []byte) wire {
	w = protowire.AppendTag(w, n, protowire.BytesType)
	return protowire.AppendBytes(w, b)
}

func (w wire) varint(n protowire.Number, v uint64) wire {
	w = protowire.AppendTag(w, n, protowire.VarintType)
	return protowire.AppendVarint(w, v)
}

func (w wire) double(n protowire.Number, f float64) wire {
	w = protowire.AppendTag(w, n, protowire.Fixed64Type)
	return protowire.AppendFixed64(w, math.Float64bits(f))
}

func (w wire) boolean(n protowire.Number, b bool) wire {
	if !b {
		return w
	}
	return w.varint(n, 1)
}

// node encodes ExternalGrpcNode (identical in both generations).
func node(n *pb.ExternalGrpcNode) wire {
	var w wire
	w = w.str(1, n.GetProviderID()).str(2, n.GetName())
	for k, v := range n.GetLabels() {
		w = w.bytes(3, wire(nil).str(1, k).str(2, v))
	}
	for k, v := range n.GetAnnotations() {
		w = w.bytes(4, wire(nil).str(1, k).str(2, v))
	}
	return w
}

// legacyTime encodes meta.v1.Time {int64 seconds = 1; int32 nanos = 2}.
func legacyTime(t time.Time) wire {
	return wire(nil).varint(1, uint64(t.Unix())).varint(2, uint64(t.Nanosecond()))
}

// legacyDuration encodes meta.v1.Duration {int64 duration = 1} in ns.
func legacyDuration(d time.Duration) wire { return wire(nil).varint(1, uint64(d)) }

// field is one decoded field.
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	b   []byte
}

func parse(b []byte) ([]field, error) {
	var out []field
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		f := field{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			f.v, n = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			f.v, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var v32 uint32
			v32, n = protowire.ConsumeFixed32(b)
			f.v = uint64(v32)
		case protowire.BytesType:
			f.b, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		out = append(out, f)
	}
	return out, nil
}

func get(fs []field, n protowire.Number) (field, bool) {
	for _, f := range fs {
		if f.num == n {
			return f, true
		}
	}
	return field{}, false
}

type legacyClient struct {
	caLock
	conn *grpc.ClientConn
}

func (c *legacyClient) invoke(ctx context.Context, rpc string, req wire, into proto.Message) ([]byte, error) {
	var resp []byte
	in := []byte(req)
	if in == nil {
		in = []byte{}
	}
	err := c.call(ctx, func(ctx context.Context) error {
		return c.conn.Invoke(ctx, method+rpc, &in, &resp, grpc.ForceCodec(rawCodec{}))
	})
	if err != nil {
		return nil, err
	}
	if into != nil {
		return resp, proto.Unmarshal(resp, into)
	}
	return resp, nil
}

func (c *legacyClient) Refresh(ctx context.Context) error {
	_, err := c.invoke(ctx, "Refresh", nil, nil)
	return err
}

func (c *legacyClient) Cleanup(ctx context.Context) error {
	_, err := c.invoke(ctx, "Cleanup", nil, nil)
	return err
}

func (c *legacyClient) NodeGroups(ctx context.Context) ([]*pb.NodeGroup, error) {
	var r pb.NodeGroupsResponse
	_, err := c.invoke(ctx, "NodeGroups", nil, &r)
	return r.GetNodeGroups(), err
}

func (c *legacyClient) NodeGroupForNode(ctx context.Context, n *pb.ExternalGrpcNode) (*pb.NodeGroup, error) {
	var r pb.NodeGroupForNodeResponse
	_, err := c.invoke(ctx, "NodeGroupForNode", wire(nil).bytes(1, node(n)), &r)
	return r.GetNodeGroup(), err
}

func (c *legacyClient) TargetSize(ctx context.Context, id string) (int32, error) {
	var r pb.NodeGroupTargetSizeResponse
	_, err := c.invoke(ctx, "NodeGroupTargetSize", wire(nil).str(1, id), &r)
	return r.GetTargetSize(), err
}

func (c *legacyClient) IncreaseSize(ctx context.Context, id string, delta int32) error {
	_, err := c.invoke(ctx, "NodeGroupIncreaseSize", wire(nil).varint(1, uint64(int64(delta))).str(2, id), nil)
	return err
}

func (c *legacyClient) DeleteNodes(ctx context.Context, id string, nodes []*pb.ExternalGrpcNode) error {
	var w wire
	for _, n := range nodes {
		w = w.bytes(1, node(n))
	}
	_, err := c.invoke(ctx, "NodeGroupDeleteNodes", w.str(2, id), nil)
	return err
}

func (c *legacyClient) DecreaseTargetSize(ctx context.Context, id string, delta int32) error {
	// int32 negatives are sign-extended to 10-byte varints on the wire.
	_, err := c.invoke(ctx, "NodeGroupDecreaseTargetSize", wire(nil).varint(1, uint64(int64(delta))).str(2, id), nil)
	return err
}

func (c *legacyClient) Nodes(ctx context.Context, id string) ([]*pb.Instance, error) {
	var r pb.NodeGroupNodesResponse
	_, err := c.invoke(ctx, "NodeGroupNodes", wire(nil).str(1, id), &r)
	return r.GetInstances(), err
}

func (c *legacyClient) TemplateNodeInfo(ctx context.Context, id string) (*corev1.Node, error) {
	raw, err := c.invoke(ctx, "NodeGroupTemplateNodeInfo", wire(nil).str(1, id), nil)
	if err != nil {
		return nil, err
	}
	fs, err := parse(raw)
	if err != nil {
		return nil, err
	}
	legacy, ok1 := get(fs, 1)
	current, ok2 := get(fs, 2)
	if !ok1 || !ok2 || len(legacy.b) == 0 {
		return nil, fmt.Errorf("template node info lacks field 1 (%v) or field 2 (%v)", ok1, ok2)
	}
	var fromLegacy, fromCurrent corev1.Node
	if err := fromLegacy.Unmarshal(legacy.b); err != nil {
		return nil, fmt.Errorf("field 1 is not a v1.Node: %w", err)
	}
	if err := fromCurrent.Unmarshal(current.b); err != nil {
		return nil, fmt.Errorf("field 2 is not a v1.Node: %w", err)
	}
	if !fromLegacy.Status.Capacity.Cpu().Equal(*fromCurrent.Status.Capacity.Cpu()) || fromLegacy.String() != fromCurrent.String() {
		return nil, fmt.Errorf("fields 1 and 2 decode to different nodes")
	}
	return &fromLegacy, nil
}

func (c *legacyClient) GetOptions(ctx context.Context, id string, d caOptions) (caOptions, error) {
	defaults := wire(nil).double(1, d.util).double(2, d.gpuUtil).
		bytes(3, legacyDuration(d.unneeded)).bytes(4, legacyDuration(d.unready)).bytes(5, legacyDuration(d.maxProvision)).
		boolean(6, d.zeroOrMax).boolean(7, d.ignoreDS)
	raw, err := c.invoke(ctx, "NodeGroupGetOptions", wire(nil).str(1, id).bytes(2, defaults), nil)
	if err != nil {
		return caOptions{}, err
	}
	top, err := parse(raw)
	if err != nil {
		return caOptions{}, err
	}
	optsField, ok := get(top, 1)
	if !ok {
		return caOptions{}, fmt.Errorf("no options in the answer")
	}
	fs, err := parse(optsField.b)
	if err != nil {
		return caOptions{}, err
	}
	var out caOptions
	if f, ok := get(fs, 1); ok {
		out.util = math.Float64frombits(f.v)
	}
	if f, ok := get(fs, 2); ok {
		out.gpuUtil = math.Float64frombits(f.v)
	}
	if f, ok := get(fs, 6); ok {
		out.zeroOrMax = f.v != 0
	}
	if f, ok := get(fs, 7); ok {
		out.ignoreDS = f.v != 0
	}
	legacyDur := func(n protowire.Number) (time.Duration, error) {
		f, ok := get(fs, n)
		if !ok {
			return 0, fmt.Errorf("legacy duration field %d missing", n)
		}
		sub, err := parse(f.b)
		if err != nil {
			return 0, err
		}
		v, _ := get(sub, 1)
		return time.Duration(int64(v.v)), nil
	}
	currentDur := func(n protowire.Number) (time.Duration, error) {
		f, ok := get(fs, n)
		if !ok {
			return 0, fmt.Errorf("current duration field %d missing", n)
		}
		sub, err := parse(f.b)
		if err != nil {
			return 0, err
		}
		s, _ := get(sub, 1)
		ns, _ := get(sub, 2)
		return time.Duration(int64(s.v))*time.Second + time.Duration(int32(ns.v)), nil
	}
	for _, p := range []struct {
		legacy, current protowire.Number
		dst             *time.Duration
	}{{3, 8, &out.unneeded}, {4, 9, &out.unready}, {5, 10, &out.maxProvision}} {
		l, err := legacyDur(p.legacy)
		if err != nil {
			return out, err
		}
		cur, err := currentDur(p.current)
		if err != nil {
			return out, err
		}
		if l != cur {
			return out, fmt.Errorf("fields %d and %d differ: %v vs %v", p.legacy, p.current, l, cur)
		}
		*p.dst = l
	}
	return out, nil
}

func (c *legacyClient) NodePrice(ctx context.Context, n *pb.ExternalGrpcNode, start, end time.Time) (float64, error) {
	var r pb.PricingNodePriceResponse
	_, err := c.invoke(ctx, "PricingNodePrice", wire(nil).bytes(1, node(n)).bytes(2, legacyTime(start)).bytes(3, legacyTime(end)), &r)
	return r.GetPrice(), err
}

func (c *legacyClient) PodPrice(ctx context.Context, pod *corev1.Pod, start, end time.Time) (float64, error) {
	raw, err := pod.Marshal()
	if err != nil {
		return 0, err
	}
	var r pb.PricingPodPriceResponse
	_, err = c.invoke(ctx, "PricingPodPrice", wire(nil).bytes(1, raw).bytes(2, legacyTime(start)).bytes(3, legacyTime(end)), &r)
	return r.GetPrice(), err
}

func (c *legacyClient) GPULabel(ctx context.Context) (string, error) {
	var r pb.GPULabelResponse
	_, err := c.invoke(ctx, "GPULabel", nil, &r)
	return r.GetLabel(), err
}

func (c *legacyClient) GPUTypes(ctx context.Context) ([]string, error) {
	var r pb.GetAvailableGPUTypesResponse
	_, err := c.invoke(ctx, "GetAvailableGPUTypes", nil, &r)
	var out []string
	for k := range r.GetGpuTypes() {
		out = append(out, k)
	}
	return out, err
}
