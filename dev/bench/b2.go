package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
	cloudadapter "github.com/nodesmith/nodesmith/services/cloud-adapter/service"
	hookrunner "github.com/nodesmith/nodesmith/services/hook-runner/service"
	lifecycle "github.com/nodesmith/nodesmith/services/lifecycle/service"
)

// B2 target (issue #9): 1000 instances Running in <= 10s on this machine.
const (
	b2TargetSize = 1000
	b2Target     = 10 * time.Second
)

// b2HookConcurrency is each hook runner's concurrency in B2.
const b2HookConcurrency = 100

// runB2 measures what the services themselves cost: every service
// in-process (each with its own NATS connection), VMs that boot at once,
// nodes Ready at once, no cloud rate limits and parallelism as large as
// the scale-up. The after_created hook is the minimum a real one does:
// `kubeadm join` over SSH, which registers the node in the simulated
// cluster, so every instance goes the whole way
// Pending -> Creating -> Created -> Joined -> Running.
func runB2(ctx context.Context, e *env) error {
	sizes := []int{100, 1000, 5000}
	if e.quick {
		sizes = []int{100, 500}
	}
	for _, n := range sizes {
		if err := b2Run(ctx, e, n, false); err != nil {
			return fmt.Errorf("IncreaseSize %d: %w", n, err)
		}
	}
	// The same without the VMs' side (no SSH servers, no hook, no
	// cluster: lifecycle's no-cluster mode makes an instance Running once
	// its VM runs): what the services and NATS alone cost.
	for _, n := range sizes[1:] {
		if err := b2Run(ctx, e, n, true); err != nil {
			return fmt.Errorf("IncreaseSize %d without hooks: %w", n, err)
		}
	}
	return nil
}

func b2Run(ctx context.Context, e *env, n int, bare bool) error {
	dir, err := e.scratch("b2")
	if err != nil {
		return err
	}
	w, err := harness.StartWorld(harness.WorldConfig{Dir: dir, BootDelay: 0, ReadyDelay: 0, RateLimits: nil, NoSSH: bare, NoCluster: bare, Logger: e.log})
	if err != nil {
		return err
	}
	defer w.Close()
	spec := harness.GroupSpec{ID: "bench", Max: n, AfterCreated: harness.JoinScript, CreateParallelism: n}
	size := count(n)
	if bare {
		spec.AfterCreated = ""
		size += " no VM side"
	}
	groups := harness.ConfigYAML([]harness.GroupSpec{spec})
	s, err := harness.StartStack(ctx, w, harness.StackConfig{
		Groups: groups,
		Logger: e.log,
		TuneLifecycle: func(c *lifecycle.Config) {
			c.AccountCreateParallelism = max(c.AccountCreateParallelism, n)
			c.ReconcileInterval = 0
		},
		TuneCloudAdapter: func(c *cloudadapter.Config) {
			c.TencentRateLimits = harness.UnlimitedCloud
			c.WatchPollInterval = 200 * time.Millisecond
		},
		TuneHookRunner: func(c *hookrunner.Config) { c.Concurrency = b2HookConcurrency },
	})
	if err != nil {
		return err
	}
	defer func() { _ = s.Stop() }()
	if err := waitGroups(ctx, s, 1); err != nil {
		return err
	}
	e.progress("B2 IncreaseSize %s", size)
	res, err := runScaleUp(ctx, w, s, "bench", n, time.Duration(n)*100*time.Millisecond+2*time.Minute, e.progress)
	if err != nil {
		return err
	}
	if res.VMsCreated != n || res.Failed != 0 {
		return fmt.Errorf("%d VMs created for %d instances, %d failed creations", res.VMsCreated, n, res.Failed)
	}
	r := e.report
	r.add(Result{Scenario: "B2", Size: size, Metric: "IncreaseSize call", Value: ms(res.IncreaseSize), Unit: "ms"})
	r.add(Result{Scenario: "B2", Size: size, Metric: "first Running", Value: sec(res.FirstRunning), Unit: "s"})
	all := Result{Scenario: "B2", Size: size, Metric: "all Running", Value: sec(res.AllRunning), Unit: "s"}
	if n == b2TargetSize && !bare {
		all.Target, all.Met = "<= 10 s", atMost(sec(res.AllRunning), sec(b2Target))
	}
	r.add(all)
	lat := harness.Summarize(res.PerInstance)
	r.add(Result{Scenario: "B2", Size: size, Metric: "per-instance to Running p50", Value: sec(lat.P50), Unit: "s"})
	addStages(r, "B2", size, res)
	r.add(Result{Scenario: "B2", Size: size, Metric: "transitions/s", Value: res.Transitions / sec(res.AllRunning), Unit: "/s"})
	r.add(Result{Scenario: "B2", Size: size, Metric: "instances Running/s", Value: float64(n) / sec(res.AllRunning), Unit: "/s"})
	e.progress("B2 %s: all Running in %s", size, res.AllRunning.Round(time.Millisecond))
	return nil
}

// waitGroups waits until lifecycle has applied its configuration (n groups).
func waitGroups(ctx context.Context, s *harness.Stack, n int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := harness.MetricSum(s.Registries["lifecycle"], "nodesmith_lifecycle_group_max_size", nil)
		if err != nil {
			return err
		}
		cnt, _ := harness.MetricCount(s.Registries["lifecycle"], "nodesmith_lifecycle_group_max_size")
		if cnt >= n && v > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lifecycle has %d of %d groups after 1m", cnt, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// addStages reports the median time instances spent in each state.
func addStages(r *Report, scenario, size string, res *scaleUp) {
	for _, st := range stages {
		if d := res.InState[st]; len(d) > 0 {
			sum := harness.Summarize(d)
			r.add(Result{Scenario: scenario, Size: size, Metric: "in " + stageName(st) + " p50", Value: sec(sum.P50), Unit: "s",
				Note: fmt.Sprintf("p99 %.2fs", sec(sum.P99))})
		}
	}
}
