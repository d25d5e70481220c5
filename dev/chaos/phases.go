package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
)

// groupView is what CA sees of a group.
type groupView struct {
	target    int
	instances []*pb.Instance
	running   int
	failed    int // instanceCreating with errorInfo: reported failed
	other     int // still on their way (creating, deleting)
}

func (r *run) view(ctx context.Context, group string) (groupView, error) {
	var v groupView
	ts, err := callCA(ctx, func(ctx context.Context) (*pb.NodeGroupTargetSizeResponse, error) {
		return r.ca.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: group})
	})
	if err != nil {
		return v, err
	}
	nodes, err := callCA(ctx, func(ctx context.Context) (*pb.NodeGroupNodesResponse, error) {
		return r.ca.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: group})
	})
	if err != nil {
		return v, err
	}
	v.target = int(ts.GetTargetSize())
	v.instances = nodes.GetInstances()
	for _, in := range v.instances {
		switch {
		case in.GetStatus().GetInstanceState() == pb.InstanceStatus_instanceRunning:
			v.running++
		case in.GetStatus().GetErrorInfo().GetErrorCode() != "":
			v.failed++
		default:
			v.other++
		}
	}
	return v, nil
}

// monitor records every instance CA sees, so the final check can prove
// none of them lost its record.
func (r *run) monitor(ctx context.Context) {
	for ctx.Err() == nil {
		for _, g := range groupIDs {
			v, err := r.view(ctx, g)
			if err != nil {
				continue // lifecycle or NATS down: CA sees errors too
			}
			r.seenMu.Lock()
			for _, in := range v.instances {
				r.seen[in.GetId()] = g
			}
			r.seenMu.Unlock()
		}
		_ = sleep(ctx, time.Second)
	}
}

// settle waits until done says every group is where it should be.
func (r *run) settle(ctx context.Context, what string, done func(map[string]groupView) (bool, string)) error {
	deadline := time.Now().Add(r.cfg.settle)
	last := time.Now()
	for {
		views := map[string]groupView{}
		var verr error
		for _, g := range groupIDs {
			v, err := r.view(ctx, g)
			if err != nil {
				verr = err
				break
			}
			views[g] = v
		}
		if verr == nil {
			ok, state := done(views)
			if ok {
				r.logf("%s: %s", what, state)
				return nil
			}
			if time.Since(last) > 15*time.Second {
				r.logf("%s: waiting: %s", what, state)
				last = time.Now()
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not reached after %s: %s: %w", what, r.cfg.settle, state, errNotSettled)
			}
		} else if time.Now().After(deadline) {
			return fmt.Errorf("%s: CA calls still failing after %s: %w", what, r.cfg.settle, verr)
		}
		for _, s := range r.all() {
			if err := s.supervise(r); err != nil {
				return err
			}
		}
		if err := sleep(ctx, time.Second); err != nil {
			return err
		}
	}
}

func describe(views map[string]groupView) string {
	s := ""
	for _, g := range groupIDs {
		v := views[g]
		s += fmt.Sprintf("%s target %d: %d running, %d failed, %d in progress; ", g, v.target, v.running, v.failed, v.other)
	}
	return s
}

// scaleUp asks for every group's instances at once, as CA would after a
// burst of pending pods, and injects the scale-up faults meanwhile.
func (r *run) scaleUp(ctx context.Context) error {
	total := r.total()
	r.logf("scale-up of %d instances with faults", total)
	r.faults.cloudFaultsOn()
	r.faults.stockOutBegin()
	for _, g := range groupIDs {
		// IncreaseSize is not retried: it is not idempotent, and no fault
		// is injected yet.
		if _, err := callCA(ctx, func(ctx context.Context) (*pb.NodeGroupIncreaseSizeResponse, error) {
			return r.ca.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: g, Delta: int32(r.requested(g))})
		}); err != nil {
			return fmt.Errorf("IncreaseSize(%s, %d): %w", g, r.requested(g), err)
		}
	}
	ictx, stopInjecting := context.WithCancel(ctx)
	defer stopInjecting()
	injected := make(chan error, 4)
	go func() { injected <- r.faults.scaleUpSchedule(ictx, total) }()
	go func() { injected <- r.faults.breakSSH(ictx) }()
	go func() { injected <- r.faults.stockOutRun(ictx) }()
	go func() { injected <- r.faults.spotRun(ictx) }()

	err := r.settle(ctx, "scale-up", func(views map[string]groupView) (bool, string) {
		ok := true
		for _, g := range groupIDs {
			v := views[g]
			if v.target != r.requested(g) || len(v.instances) != r.requested(g) || v.other > 0 {
				ok = false
			}
		}
		r.faults.mu.Lock()
		spotDone := r.faults.spot.done
		r.faults.mu.Unlock()
		return ok && r.faults.scaleUpDone.Load() && spotDone, describe(views)
	})
	stopInjecting()
	for range 4 {
		if ierr := <-injected; ierr != nil && !errors.Is(ierr, context.Canceled) {
			err = errors.Join(err, fmt.Errorf("injecting faults: %w", ierr))
		}
	}
	r.faults.countHungHooks()
	r.faults.countHungVMs()
	if err == nil {
		r.faults.afterScaleUp, err = r.views(ctx)
	}
	return err
}

// scaleDown deletes Running instances as CA does (DeleteNodes in small
// batches, retried while they fail), and also the failed creations (CA
// deletes instances that report errorInfo), with more faults.
func (r *run) scaleDown(ctx context.Context) error {
	expect := map[string]int{}
	views, err := r.views(ctx)
	if err != nil {
		return err
	}
	plan, err := r.deletionPlan(views)
	if err != nil {
		return err
	}
	var batches []deleteBatch
	for _, g := range groupIDs {
		v := views[g]
		want := plan[g]
		var running, failed []*pb.Instance
		for _, in := range v.instances {
			if in.GetStatus().GetInstanceState() == pb.InstanceStatus_instanceRunning {
				running = append(running, in)
			} else {
				failed = append(failed, in)
			}
		}
		sort.Slice(running, func(i, j int) bool { return running[i].GetId() < running[j].GetId() })
		if len(running) < want {
			return fmt.Errorf("group %s has %d Running instances, want to delete %d", g, len(running), want)
		}
		del := append(slices.Clone(running[:want]), failed...)
		r.faults.deleted[g] = len(del)
		r.faults.deletedFailed += len(failed)
		expect[g] = v.target - len(del)
		for i := 0; len(del) > 0; i++ {
			n := min(len(del), 10)
			batches = append(batches, deleteBatch{group: g, nodes: del[:n], round: i})
			del = del[n:]
		}
	}
	r.logf("scale-down: %d DeleteNodes calls (%d Running instances, %d of them on ECS; %d failed creations)", len(batches), r.cfg.scaleDown+plan[ecsGroup], plan[ecsGroup], r.faults.deletedFailed)
	// Interleave groups, as CA's scale-down of several groups would.
	sort.SliceStable(batches, func(i, j int) bool { return batches[i].round < batches[j].round })
	for i, b := range batches {
		if i == len(batches)/4 {
			// CA's client must ride out its provider restarting: calls fail
			// while it is down and the loop retries them (DeleteNodes is
			// idempotent, even for a call that took effect before the kill).
			if err := r.faults.killAndRestart(ctx, r.gateway, 2*time.Second, "scale-down, a quarter of the DeleteNodes calls made"); err != nil {
				return err
			}
		}
		if i == len(batches)/2 {
			if err := r.faults.scaleDownFaults(ctx); err != nil {
				return err
			}
		}
		if err := r.deleteNodes(ctx, b); err != nil {
			return err
		}
	}
	return r.settle(ctx, "scale-down", func(views map[string]groupView) (bool, string) {
		ok := true
		for _, g := range groupIDs {
			v := views[g]
			if v.target != expect[g] || len(v.instances) != expect[g] || v.running != expect[g] {
				ok = false
			}
		}
		return ok, describe(views)
	})
}

// deletionPlan spreads the Running instances to delete over the groups:
// half from alpha, half from beta, shifting to the other (then to gamma)
// when faults left a group with fewer Running instances.
func (r *run) deletionPlan(views map[string]groupView) (map[string]int, error) {
	plan := map[string]int{"alpha": r.cfg.scaleDown / 2, "beta": r.cfg.scaleDown - r.cfg.scaleDown/2, "gamma": 0,
		ecsGroup: min(r.cfg.ecsScaleDown, views[ecsGroup].running)}
	short := 0
	for _, g := range []string{"beta", "alpha"} {
		plan[g] += short
		short = max(plan[g]-views[g].running, 0)
		plan[g] -= short
	}
	for _, g := range []string{"beta", "gamma"} {
		add := min(short, views[g].running-plan[g])
		plan[g] += add
		short -= add
	}
	if short > 0 {
		return nil, fmt.Errorf("only %d instances Running, want to delete %d", r.cfg.scaleDown-short, r.cfg.scaleDown)
	}
	return plan, nil
}

type deleteBatch struct {
	group string
	nodes []*pb.Instance
	// round orders batches round-robin across groups.
	round int
}

// deleteNodes calls DeleteNodes until it succeeds (it is idempotent:
// nodes already being deleted are accepted), as CA retries in later loops.
func (r *run) deleteNodes(ctx context.Context, b deleteBatch) error {
	nodes := make([]*pb.ExternalGrpcNode, len(b.nodes))
	for i, in := range b.nodes {
		nodes[i] = &pb.ExternalGrpcNode{ProviderID: in.GetId()}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for attempt := 1; ; attempt++ {
		_, err := callCA(ctx, func(ctx context.Context) (*pb.NodeGroupDeleteNodesResponse, error) {
			return r.ca.NodeGroupDeleteNodes(ctx, &pb.NodeGroupDeleteNodesRequest{Id: b.group, Nodes: nodes})
		})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("DeleteNodes(%s, %d nodes) still failing after %d attempts: %w", b.group, len(nodes), attempt, err)
		}
		r.faults.caRetries.Add(1)
		if err := sleep(ctx, time.Second); err != nil {
			return err
		}
	}
}

func (r *run) views(ctx context.Context) (map[string]groupView, error) {
	out := map[string]groupView{}
	for _, g := range groupIDs {
		v, err := r.view(ctx, g)
		if err != nil {
			return nil, err
		}
		out[g] = v
	}
	return out, nil
}
