package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	hookv1 "github.com/nodesmith/nodesmith/proto/nodesmith/hook/v1"
	hookrunner "github.com/nodesmith/nodesmith/services/hook-runner/service"
	"github.com/nodesmith/nodesmith/tools/simvm"
)

// B4 target (issue #9): >= 3.5x the throughput of one replica with four.
const b4Target = 3.5

// b4 workload: every replica runs b4Concurrency hooks at once, each
// `sleep 2` over SSH; b4VMs VMs share the load.
const (
	b4Concurrency = 10
	b4HookSeconds = 2
	b4VMs         = 40
)

// runB4 measures hook-runner throughput with 1, 2 and 4 replicas
// (separate service.Run instances on one NATS, each with its own
// connection and a fixed concurrency), fed RunHook commands published
// straight onto the command stream, as lifecycle publishes them.
func runB4(ctx context.Context, e *env) error {
	hooks := 240
	if e.quick {
		hooks = 80
	}
	var base float64
	for _, replicas := range []int{1, 2, 4} {
		rate, took, split, err := b4Run(ctx, e, replicas, hooks)
		if err != nil {
			return fmt.Errorf("%d replicas: %w", replicas, err)
		}
		size := fmt.Sprintf("%d replica(s)", replicas)
		e.report.add(Result{Scenario: "B4", Size: size, Metric: fmt.Sprintf("%d hooks of %ds", hooks, b4HookSeconds), Value: sec(took), Unit: "s", Note: "hooks per replica " + split})
		e.report.add(Result{Scenario: "B4", Size: size, Metric: "throughput", Value: rate, Unit: "hooks/s",
			Note: fmt.Sprintf("ideal %.1f/s (concurrency %d x replicas / %ds)", float64(replicas*b4Concurrency)/b4HookSeconds, b4Concurrency, b4HookSeconds)})
		if replicas == 1 {
			base = rate
			continue
		}
		ratio := Result{Scenario: "B4", Size: size, Metric: "throughput vs 1 replica", Value: rate / base, Unit: "x"}
		if replicas == 4 {
			ratio.Target, ratio.Met = ">= 3.5x", atLeast(rate/base, b4Target)
		}
		e.report.add(ratio)
	}
	return nil
}

func b4Run(ctx context.Context, e *env, replicas, hooks int) (rate float64, took time.Duration, split string, err error) {
	dir, err := e.scratch("b4")
	if err != nil {
		return 0, 0, "", err
	}
	w, err := harness.StartWorld(harness.WorldConfig{Dir: dir, NoCluster: true, Logger: e.log})
	if err != nil {
		return 0, 0, "", err
	}
	defer w.Close()
	var ips []string
	for i := range b4VMs {
		ip := fmt.Sprintf("127.78.%d.%d", i/250, i%250+1)
		if _, err := w.VMs.Start(simvm.VMSpec{ID: fmt.Sprintf("vm-%03d", i), IP: ip}); err != nil {
			return 0, 0, "", err
		}
		ips = append(ips, ip)
	}
	s, err := harness.StartStack(ctx, w, harness.StackConfig{
		Lifecycle: -1, CloudAdapters: -1, Gateways: -1, HookRunners: replicas, Logger: e.log,
		TuneHookRunner: func(c *hookrunner.Config) { c.Concurrency = b4Concurrency },
	})
	if err != nil {
		return 0, 0, "", err
	}
	defer func() { _ = s.Stop() }()

	nc, err := w.ConnectNATS(natsauth.Lifecycle)
	if err != nil {
		return 0, 0, "", err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, 0, "", err
	}
	var done, failed atomic.Int64
	var mu sync.Mutex
	perRunner := map[string]int{}
	var firstErr atomic.Value
	all := make(chan struct{})
	sub, err := nc.Subscribe(messaging.SubjectHookResult, func(m *nats.Msg) {
		var r hookv1.HookResult
		if err := proto.Unmarshal(m.Data, &r); err != nil || !r.GetSucceeded() {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, fmt.Sprintf("%s: %s (exit %d)", r.GetInstanceId(), r.GetError(), r.GetExitCode()))
		}
		mu.Lock()
		perRunner[r.GetRunner()]++
		mu.Unlock()
		if done.Add(1) == int64(hooks) {
			close(all)
		}
	})
	if err != nil {
		return 0, 0, "", err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		return 0, 0, "", err
	}

	pub := messaging.NewPublisher(js)
	start := time.Now()
	for i := range hooks {
		id := fmt.Sprintf("bench-%05d", i)
		cmd := &hookv1.RunHook{
			InstanceId: id, Attempt: 1, Hook: hookv1.HookKind_HOOK_KIND_AFTER_CREATED, Group: "bench",
			Host: ips[i%len(ips)], Port: uint32(w.SSHPort), Script: fmt.Sprintf("sleep %d", b4HookSeconds),
			Timeout: durationpb.New(time.Minute), HookName: "afterCreated",
			Env: map[string]string{"NODE_NAME": id, "INSTANCE_ID": id, "NODE_GROUP": "bench"},
		}
		if _, err := pub.Publish(ctx, messaging.SubjectHookRun, "hook."+id+".1", cmd); err != nil {
			return 0, 0, "", err
		}
	}
	timeout := time.Duration(hooks*b4HookSeconds/replicas)*time.Second + 2*time.Minute
	select {
	case <-all:
	case <-ctx.Done():
		return 0, 0, "", ctx.Err()
	case <-time.After(timeout):
		return 0, 0, "", fmt.Errorf("%d of %d hook results after %s", done.Load(), hooks, timeout)
	}
	took = time.Since(start)
	if n := failed.Load(); n > 0 {
		return 0, 0, "", fmt.Errorf("%d of %d hooks failed, first: %v", n, hooks, firstErr.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	e.progress("B4 %d replica(s): %d hooks in %s, per replica %v", replicas, hooks, took.Round(time.Millisecond), perRunner)
	return float64(hooks) / sec(took), took, fmt.Sprint(perRunner), nil
}
