package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsembed"
)

// b5Groups is how many groups B5's instances are spread over.
const b5Groups = 100

// runB5 measures the resident memory of lifecycle and the api-gateway,
// each its own process built from its cmd/, after loading 0, 10k and 50k
// instance records (seeded in KV as lifecycle writes them): the gateway
// once SERVING, lifecycle once its gauges count every instance; both
// after a few seconds of settling. RSS is VmRSS from /proc/<pid>/status.
func runB5(ctx context.Context, e *env) error {
	sizes := []int{0, 10_000, 50_000}
	if e.quick {
		sizes = []int{0, 10_000}
	}
	base := map[string]harness.Memory{}
	for _, n := range sizes {
		mem, err := b5Run(ctx, e, n)
		if err != nil {
			return fmt.Errorf("%d instances: %w", n, err)
		}
		for _, name := range []string{"lifecycle", "api-gateway"} {
			m := mem[name]
			res := Result{Scenario: "B5", Size: count(n), Metric: name + " RSS", Value: float64(m.RSSKiB) / 1024, Unit: "MiB",
				Note: fmt.Sprintf("peak %.1f MiB", float64(m.HWMKiB)/1024)}
			e.report.add(res)
			if n == 0 {
				base[name] = m
			} else {
				e.report.add(Result{Scenario: "B5", Size: count(n), Metric: name + " RSS per instance", Value: float64(m.RSSKiB-base[name].RSSKiB) / float64(n), Unit: "KiB"})
			}
		}
	}
	return nil
}

func b5Run(ctx context.Context, e *env, n int) (map[string]harness.Memory, error) {
	for _, b := range []string{"lifecycle", "api-gateway"} {
		if _, err := e.binary(ctx, b); err != nil {
			return nil, err
		}
	}
	dir, err := e.scratch("b5")
	if err != nil {
		return nil, err
	}
	ns, err := natsembed.Start(natsembed.Options{Port: -1, StoreDir: dir})
	if err != nil {
		return nil, err
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if err := messaging.Ensure(ctx, js, messaging.DefaultOptions()); err != nil {
		return nil, err
	}
	seed := harness.BuildSeed(b5Groups, n, 5)
	if err := seed.Write(ctx, js); err != nil {
		return nil, err
	}
	e.progress("B5 %s instances seeded (%s)", count(n), mib(seed.Bytes))
	out := map[string]harness.Memory{}

	gw, _, err := startGatewayProcess(ctx, e, ns.ClientURL())
	if err != nil {
		return nil, err
	}
	defer func() { _ = gw.Stop(10 * time.Second) }()

	lc, err := startLifecycleProcess(ctx, e, ns.ClientURL(), n)
	if err != nil {
		return nil, err
	}
	defer func() { _ = lc.Stop(30 * time.Second) }()

	// Let both settle (a few dispatcher passes, a GC cycle or two).
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(5 * time.Second):
	}
	for _, p := range []*harness.Process{gw, lc} {
		m, err := p.Memory()
		if err != nil {
			return nil, err
		}
		out[p.Name] = m
	}
	return out, nil
}

// startLifecycleProcess runs the lifecycle binary (no configuration file:
// the seeded groups are API groups; no cluster; no reconciler, as there is
// no cloud-adapter) and waits until its gauges count want instances.
func startLifecycleProcess(ctx context.Context, e *env, natsURL string, want int) (*harness.Process, error) {
	bin, err := e.binary(ctx, "lifecycle")
	if err != nil {
		return nil, err
	}
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	logFile := filepath.Join(e.tmp, "lifecycle.log")
	p, err := harness.StartProcess("lifecycle", bin, []string{
		"--nats-url", natsURL, "--health-addr", addr, "--reconcile-interval=0", "--cluster=none",
		"--log-level", "warn", "--log-format", "text",
	}, nil, logFile)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		got, err := harness.ScrapeSum(ctx, "http://"+addr+"/metrics", "nodesmith_lifecycle_instances")
		if err == nil && int(got) == want {
			return p, nil
		}
		if xerr := p.ExitedError(logFile); xerr != nil {
			return nil, xerr
		}
		if time.Now().After(deadline) {
			p.Kill()
			if err == nil {
				err = fmt.Errorf("counted %v", got)
			}
			return nil, fmt.Errorf("lifecycle does not count %d instances after 5m: %w", want, err)
		}
		select {
		case <-ctx.Done():
			p.Kill()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
