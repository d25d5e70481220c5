package harness

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
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
	RPCTemplateNodeInfo = "NodeGroupTemplateNodeInfo"
	RPCNodeGroupNodes   = "NodeGroupNodes"
	RPCDeleteNodes      = "NodeGroupDeleteNodes"
)

// RPCs are the RPC names a CA loop makes, in the order reports list them.
var RPCs = []string{RPCNodeGroupForNode, RPCGetOptions, RPCTargetSize, RPCTemplateNodeInfo, RPCNodeGroupNodes, RPCNodeGroups, RPCRefresh, RPCDeleteNodes}

// CAMix is how many calls of each kind Cluster Autoscaler makes per loop,
// as measured with real CA 1.33.2 and 1.36.1 (issue 21). CA's externalgrpc
// client caches NodeGroups and NodeGroupForNode until the next Refresh,
// but not NodeGroupGetOptions, which scale-down's eligibility and
// unneeded-time checks ask per node: it is CA's most frequent call, and
// it grows with nodes, not groups.
type CAMix struct {
	// OptionsPerNode is the NodeGroupGetOptions calls per managed node per
	// loop (measured 2 to 5).
	OptionsPerNode int
	// OptionsPerRemovedNode replaces OptionsPerNode for a node that the
	// loop removes (measured ~5: 42 calls per loop while 8 nodes were
	// being removed).
	OptionsPerRemovedNode int
	// TargetSizePerGroup is the NodeGroupTargetSize calls per group per
	// loop (cluster state, scale-up and scale-down each ask).
	TargetSizePerGroup int
	// NodesEvery is how many loops pass between two NodeGroupNodes calls
	// per group: CA caches the instances for several loops (measured 0.2
	// to 0.5 calls per loop).
	NodesEvery int
}

// DefaultCAMix is the measured call mix, GetOptions at 3 per node.
func DefaultCAMix() CAMix {
	return CAMix{OptionsPerNode: 3, OptionsPerRemovedNode: 5, TargetSizePerGroup: 3, NodesEvery: 3}
}

// Validate rejects a mix CA cannot make.
func (m CAMix) Validate() error {
	if m.OptionsPerNode < 0 || m.OptionsPerRemovedNode < 0 || m.TargetSizePerGroup < 1 || m.NodesEvery < 1 {
		return fmt.Errorf("invalid CA call mix %+v: per-node calls >= 0, TargetSize per group and NodesEvery >= 1", m)
	}
	return nil
}

// LoopStat is one loop as CA experiences it.
type LoopStat struct {
	// Wall is the whole loop, from Refresh until the last call returned
	// (the scale-down's DeleteNodes included).
	Wall time.Duration
	// InProvider is the sum of the latencies of the loop's sequential
	// calls: the time CA's loop waits for the provider. The parallel
	// DeleteNodes are not in it.
	InProvider time.Duration
	// Calls counts the loop's calls by RPC.
	Calls map[string]int
	// Removed is the number of nodes the loop removed.
	Removed int
}

// Total is the number of calls of the loop.
func (s LoopStat) Total() int {
	n := 0
	for _, c := range s.Calls {
		n += c
	}
	return n
}

// Expect is what a correct provider answers for a seeded cluster; CALoop
// checks every answer against it when given one.
type Expect struct {
	// Groups is the group id of each node ("" for unmanaged ones).
	Groups []string
	// Targets are the target sizes by group.
	Targets map[string]int32
	// Instances are the instance ids NodeGroupNodes reports, by group,
	// sorted.
	Instances map[string][]string
	// Options are the NodeGroupGetOptions answers by group.
	Options map[string]*pb.NodeGroupAutoscalingOptions
}

// CALoop is what Cluster Autoscaler's externalgrpc cloud provider does
// against the provider in its loops, with the call mix of CAMix:
// sequential calls as CA makes them (its client holds one lock per call),
// each under CA's 5s deadline, and on scale-down one DeleteNodes per
// removed node, in parallel.
type CALoop struct {
	c   pb.CloudProviderClient
	mix CAMix
	// mu guards Latencies: the parallel DeleteNodes record into it.
	mu sync.Mutex
	// Latencies are every call's latency by RPC, across loops.
	Latencies map[string][]time.Duration
	// Loops are the loops run since the last Reset.
	Loops []LoopStat
	// n counts loops since creation: NodeGroupNodes is due every
	// mix.NodesEvery loops, the first loop included.
	n int
}

// Dial connects like CA's client (plaintext on loopback here).
func Dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// NewCALoop returns a loop over conn making the calls of mix.
func NewCALoop(conn *grpc.ClientConn, mix CAMix) (*CALoop, error) {
	if err := mix.Validate(); err != nil {
		return nil, err
	}
	return &CALoop{c: pb.NewCloudProviderClient(conn), mix: mix, Latencies: map[string][]time.Duration{}}, nil
}

// CADefaults are the autoscaling defaults CA sends with GetOptions (its
// flag defaults), in the current wire generation.
var CADefaults = &pb.NodeGroupAutoscalingOptions{
	ScaleDownUtilizationThreshold: 0.5, ScaleDownGpuUtilizationThreshold: 0.5,
	ScaleDownUnneededDuration: durationpb.New(10 * time.Minute), ScaleDownUnreadyDuration: durationpb.New(20 * time.Minute),
	MaxNodeProvisionDuration: durationpb.New(15 * time.Minute),
}

// loop is the bookkeeping of one running loop.
type loop struct {
	l    *CALoop
	stat LoopStat
}

func call[T any](lp *loop, rpc string, f func(ctx context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	v, err := f(ctx)
	d := time.Since(start)
	lp.l.record(rpc, d)
	lp.stat.InProvider += d
	lp.stat.Calls[rpc]++
	if err != nil {
		var zero T
		return zero, fmt.Errorf("%s: %w", rpc, err)
	}
	return v, nil
}

func (l *CALoop) record(rpc string, d time.Duration) {
	l.mu.Lock()
	l.Latencies[rpc] = append(l.Latencies[rpc], d)
	l.mu.Unlock()
}

// Run runs one loop over the cluster's nodes and removes the nodes at the
// indexes in remove (none: a steady loop). CA's order: Refresh,
// NodeGroups, NodeGroupForNode per node (it caches the answers until the
// next Refresh), NodeGroupNodes per group when due, TargetSize and
// TemplateNodeInfo per group, then scale-down's passes over the nodes, each
// asking GetOptions for every managed node (and NodeGroupForNode again for
// unmanaged ones, whose empty answers CA does not cache), TargetSize per
// group around them, and finally one DeleteNodes per removed node, all in
// parallel. With exp, every answer is checked (the benchmark must measure
// correct answers).
func (l *CALoop) Run(nodes []*pb.ExternalGrpcNode, remove []int, exp *Expect) error {
	lp := &loop{l: l, stat: LoopStat{Calls: map[string]int{}, Removed: len(remove)}}
	start := time.Now()
	err := lp.run(nodes, remove, exp)
	lp.stat.Wall = time.Since(start)
	l.n++
	if err != nil {
		return err
	}
	l.Loops = append(l.Loops, lp.stat)
	return nil
}

func (lp *loop) run(nodes []*pb.ExternalGrpcNode, remove []int, exp *Expect) error {
	l, c, mix := lp.l, lp.l.c, lp.l.mix
	if _, err := call(lp, RPCRefresh, func(ctx context.Context) (*pb.RefreshResponse, error) {
		return c.Refresh(ctx, &pb.RefreshRequest{})
	}); err != nil {
		return err
	}
	res, err := call(lp, RPCNodeGroups, func(ctx context.Context) (*pb.NodeGroupsResponse, error) {
		return c.NodeGroups(ctx, &pb.NodeGroupsRequest{})
	})
	if err != nil {
		return err
	}
	groups := res.GetNodeGroups()
	if exp != nil && len(groups) != len(exp.Targets) {
		return fmt.Errorf("NodeGroups: %d groups, want %d", len(groups), len(exp.Targets))
	}

	// CA's cache of NodeGroupForNode answers for this loop.
	groupOf := make([]string, len(nodes))
	forNode := func(i int) error {
		r, err := call(lp, RPCNodeGroupForNode, func(ctx context.Context) (*pb.NodeGroupForNodeResponse, error) {
			return c.NodeGroupForNode(ctx, &pb.NodeGroupForNodeRequest{Node: nodes[i]})
		})
		if err != nil {
			return err
		}
		groupOf[i] = r.GetNodeGroup().GetId()
		if exp != nil && groupOf[i] != exp.Groups[i] {
			return fmt.Errorf("NodeGroupForNode(%s) = %q, want %q", nodes[i].GetProviderID(), groupOf[i], exp.Groups[i])
		}
		return nil
	}
	for i := range nodes {
		if err := forNode(i); err != nil {
			return err
		}
	}

	if l.n%mix.NodesEvery == 0 {
		for _, g := range groups {
			r, err := call(lp, RPCNodeGroupNodes, func(ctx context.Context) (*pb.NodeGroupNodesResponse, error) {
				return c.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: g.GetId()})
			})
			if err != nil {
				return err
			}
			if exp != nil {
				var ids []string
				for _, in := range r.GetInstances() {
					if in.GetStatus().GetInstanceState() != pb.InstanceStatus_instanceRunning {
						return fmt.Errorf("NodeGroupNodes(%s): instance %s is %v, want running", g.GetId(), in.GetId(), in.GetStatus().GetInstanceState())
					}
					ids = append(ids, in.GetId())
				}
				slices.Sort(ids)
				if !slices.Equal(ids, exp.Instances[g.GetId()]) {
					return fmt.Errorf("NodeGroupNodes(%s): %d instances, not the %d expected", g.GetId(), len(ids), len(exp.Instances[g.GetId()]))
				}
			}
		}
	}

	targetSizes := func() error {
		for _, g := range groups {
			r, err := call(lp, RPCTargetSize, func(ctx context.Context) (*pb.NodeGroupTargetSizeResponse, error) {
				return c.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: g.GetId()})
			})
			if err != nil {
				return err
			}
			if exp != nil && r.GetTargetSize() != exp.Targets[g.GetId()] {
				return fmt.Errorf("NodeGroupTargetSize(%s) = %d, want %d", g.GetId(), r.GetTargetSize(), exp.Targets[g.GetId()])
			}
		}
		return nil
	}
	if err := targetSizes(); err != nil {
		return err
	}
	for _, g := range groups {
		r, err := call(lp, RPCTemplateNodeInfo, func(ctx context.Context) (*pb.NodeGroupTemplateNodeInfoResponse, error) {
			return c.NodeGroupTemplateNodeInfo(ctx, &pb.NodeGroupTemplateNodeInfoRequest{Id: g.GetId()})
		})
		if err != nil {
			return err
		}
		if exp != nil && (len(r.GetNodeBytes()) == 0 || !slices.Equal(r.GetNodeBytes(), r.GetNodeInfo())) {
			return fmt.Errorf("NodeGroupTemplateNodeInfo(%s): %d nodeBytes, %d nodeInfo bytes, want the same non-empty bytes in both", g.GetId(), len(r.GetNodeBytes()), len(r.GetNodeInfo()))
		}
	}

	// Scale-up asks the targets again.
	if mix.TargetSizePerGroup >= 2 {
		if err := targetSizes(); err != nil {
			return err
		}
	}
	removing := make([]bool, len(nodes))
	for _, i := range remove {
		removing[i] = true
	}
	passes := mix.OptionsPerNode
	if len(remove) > 0 {
		passes = max(passes, mix.OptionsPerRemovedNode)
	}
	for p := range passes {
		for i, n := range nodes {
			if groupOf[i] == "" {
				if err := forNode(i); err != nil {
					return err
				}
				continue
			}
			limit := mix.OptionsPerNode
			if removing[i] {
				limit = mix.OptionsPerRemovedNode
			}
			if p >= limit {
				continue
			}
			r, err := call(lp, RPCGetOptions, func(ctx context.Context) (*pb.NodeGroupAutoscalingOptionsResponse, error) {
				return c.NodeGroupGetOptions(ctx, &pb.NodeGroupAutoscalingOptionsRequest{Id: groupOf[i], Defaults: CADefaults})
			})
			if err != nil {
				return err
			}
			if exp != nil && !proto.Equal(r.GetNodeGroupAutoscalingOptions(), exp.Options[groupOf[i]]) {
				return fmt.Errorf("NodeGroupGetOptions(%s) for node %s = %v, want %v", groupOf[i], n.GetName(), r.GetNodeGroupAutoscalingOptions(), exp.Options[groupOf[i]])
			}
		}
	}
	// Scale-down asks the rest.
	for range mix.TargetSizePerGroup - 2 {
		if err := targetSizes(); err != nil {
			return err
		}
	}
	return lp.deleteNodes(nodes, groupOf, remove)
}

// deleteNodes is scale-down's actuation: one DeleteNodes per node, each in
// its own goroutine as CA deletes nodes, waited for here.
func (lp *loop) deleteNodes(nodes []*pb.ExternalGrpcNode, groupOf []string, remove []int) error {
	if len(remove) == 0 {
		return nil
	}
	errs := make([]error, len(remove))
	var wg sync.WaitGroup
	for k, i := range remove {
		if groupOf[i] == "" {
			return fmt.Errorf("node %s is not managed: CA does not remove it", nodes[i].GetName())
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			_, err := lp.l.c.NodeGroupDeleteNodes(ctx, &pb.NodeGroupDeleteNodesRequest{Id: groupOf[i], Nodes: []*pb.ExternalGrpcNode{nodes[i]}})
			lp.l.record(RPCDeleteNodes, time.Since(start))
			if err != nil {
				errs[k] = fmt.Errorf("%s(%s): %w", RPCDeleteNodes, nodes[i].GetName(), err)
			}
		})
	}
	wg.Wait()
	lp.stat.Calls[RPCDeleteNodes] += len(remove)
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Reset forgets recorded latencies and loops (after a warm-up loop).
func (l *CALoop) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Latencies = map[string][]time.Duration{}
	l.Loops = nil
}
