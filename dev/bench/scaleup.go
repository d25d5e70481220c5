package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
)

// scaleUp is one IncreaseSize measured to the last Running instance.
type scaleUp struct {
	// IncreaseSize is how long the call took (records written, visible).
	IncreaseSize time.Duration
	// AllRunning is from the call to the last instance Running.
	AllRunning time.Duration
	// FirstRunning is from the call to the first instance Running.
	FirstRunning time.Duration
	// PerInstance are each instance's call-to-Running latencies.
	PerInstance []time.Duration
	// Transitions are the state transitions lifecycle made meanwhile.
	Transitions float64
	// VMsCreated is what the emulator created (duplicates would show).
	VMsCreated int
	// RunInstancesCalls is what the emulator was asked (create batches).
	RunInstancesCalls int
	// Failed are instances whose creation failed.
	Failed int
	// InState are the times instances spent in each state on their way
	// to Running, by state.
	InState map[statev1.InstanceState][]time.Duration
}

// stages are the states an instance passes on its way to Running.
var stages = []statev1.InstanceState{
	statev1.InstanceState_INSTANCE_STATE_PENDING, statev1.InstanceState_INSTANCE_STATE_CREATING,
	statev1.InstanceState_INSTANCE_STATE_CREATED, statev1.InstanceState_INSTANCE_STATE_JOINED,
}

func stageName(s statev1.InstanceState) string {
	return map[statev1.InstanceState]string{
		statev1.InstanceState_INSTANCE_STATE_PENDING:  "Pending (waiting for a create slot)",
		statev1.InstanceState_INSTANCE_STATE_CREATING: "Creating (create call to VM running)",
		statev1.InstanceState_INSTANCE_STATE_CREATED:  "Created (after_created hook)",
		statev1.InstanceState_INSTANCE_STATE_JOINED:   "Joined (to node Ready)",
	}[s]
}

// runScaleUp calls IncreaseSize(group, n) through the gateway, as CA does,
// and waits until n instances are Running (or timeout).
func runScaleUp(ctx context.Context, w *harness.World, s *harness.Stack, group string, n int, timeout time.Duration, progress func(string, ...any)) (*scaleUp, error) {
	conn, err := harness.Dial(s.GRPCAddr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	client := pb.NewCloudProviderClient(conn)
	reg := s.Registries["lifecycle"]
	running := func() (float64, error) {
		return harness.MetricSum(reg, "nodesmith_lifecycle_instances", map[string]string{"group": group, "state": "Running"})
	}
	transitions := func() float64 {
		v, _ := harness.MetricSum(reg, "nodesmith_lifecycle_transitions_total", nil)
		return v
	}
	// CA asks only for groups its NodeGroups call returned: wait until the
	// gateway's read model has the group (lifecycle may have it first).
	if err := waitNodeGroup(ctx, client, group); err != nil {
		return nil, err
	}
	before := transitions()
	t0 := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second) // CA's grpc_timeout
	_, err = client.NodeGroupIncreaseSize(cctx, &pb.NodeGroupIncreaseSizeRequest{Id: group, Delta: int32(n)})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("IncreaseSize(%s, %d): %w", group, n, err)
	}
	res := &scaleUp{IncreaseSize: time.Since(t0)}
	deadline := t0.Add(timeout)
	lastReport := time.Now()
	for {
		r, err := running()
		if err != nil {
			return nil, err
		}
		if int(r) >= n {
			res.AllRunning = time.Since(t0)
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d instances Running after %s", int(r), n, timeout)
		}
		if time.Since(lastReport) > 15*time.Second {
			progress("  %d/%d Running after %s", int(r), n, time.Since(t0).Round(time.Second))
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	res.Transitions = transitions() - before
	st := w.Emulator.Stats()
	res.VMsCreated, res.RunInstancesCalls = st.VMsCreated, st.RunInstancesCalls

	nc, err := w.ConnectNATS(natsauth.Lifecycle)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ins, err := harness.ReadInstances(ctx, js)
	if err != nil {
		return nil, err
	}
	res.InState = map[statev1.InstanceState][]time.Duration{}
	first := time.Duration(1<<63 - 1)
	for _, in := range ins {
		if in.GetGroup() != group {
			continue
		}
		if in.GetCreationFailed() {
			res.Failed++
		}
		if at, ok := harness.ReachedAt(in, statev1.InstanceState_INSTANCE_STATE_RUNNING); ok {
			d := time.Duration(at - t0.UnixNano())
			res.PerInstance = append(res.PerInstance, d)
			first = min(first, d)
		}
		// Time in a state: from entering it to entering the next one.
		h := in.GetHistory()
		for i := 0; i+1 < len(h); i++ {
			res.InState[h[i].GetTo()] = append(res.InState[h[i].GetTo()], h[i+1].GetAt().AsTime().Sub(h[i].GetAt().AsTime()))
		}
	}
	res.FirstRunning = first
	return res, nil
}

// waitNodeGroup waits until the gateway lists group in NodeGroups.
func waitNodeGroup(ctx context.Context, client pb.CloudProviderClient, group string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := client.NodeGroups(cctx, &pb.NodeGroupsRequest{})
		cancel()
		if err == nil {
			for _, g := range res.GetNodeGroups() {
				if g.GetId() == group {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the gateway does not list node group %s after 1m (last error: %w)", group, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
