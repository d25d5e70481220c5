package main

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsembed"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
)

// B1 targets (issue #9).
const (
	b1P99Target   = 150 * time.Microsecond
	b1RatioTarget = 1.5
	b1RatioSize   = 10_000
)

// b1Seed makes the seeded state reproducible, and identical in the
// floor process, which rebuilds it.
const b1Seed = 1

type b1Size struct{ instances, groups, loops int }

func b1Sizes(quick bool) []b1Size {
	if quick {
		return []b1Size{{1_000, 100, 3}, {10_000, 100, 2}}
	}
	return []b1Size{
		{1_000, 100, 10}, {1_000, 500, 10},
		{10_000, 100, 5}, {10_000, 500, 5},
		{50_000, 100, 3}, {50_000, 500, 3},
	}
}

// runB1 seeds the KV buckets with records shaped as lifecycle writes them,
// runs only the api-gateway against them and drives CA's loop over real
// gRPC on loopback; the same loop against a minimal gRPC server answering
// from maps is the floor. Loops alternate between the two so both see the
// same machine noise.
func runB1(ctx context.Context, e *env) error {
	for _, sz := range b1Sizes(e.quick) {
		if err := b1Run(ctx, e, sz); err != nil {
			return fmt.Errorf("%d instances in %d groups: %w", sz.instances, sz.groups, err)
		}
	}
	return nil
}

func b1Run(ctx context.Context, e *env, sz b1Size) error {
	size := fmt.Sprintf("%s/%dg", count(sz.instances), sz.groups)
	e.progress("B1 %s: seeding", size)
	dir, err := e.scratch("b1")
	if err != nil {
		return err
	}
	ns, err := natsembed.Start(natsembed.Options{Port: -1, StoreDir: dir})
	if err != nil {
		return err
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := messaging.Ensure(ctx, js, messaging.DefaultOptions()); err != nil {
		return err
	}
	seed := harness.BuildSeed(sz.groups, sz.instances, b1Seed)
	if err := seed.Write(ctx, js); err != nil {
		return err
	}

	if _, err := e.binary(ctx, "api-gateway"); err != nil {
		return err
	}
	start := time.Now()
	gwProc, gwAddr, err := startGatewayProcess(ctx, e, ns.ClientURL())
	if err != nil {
		return err
	}
	defer func() { _ = gwProc.Stop(10 * time.Second) }()
	loaded := time.Since(start)
	echoAddr, err := harness.FreeAddr()
	if err != nil {
		return err
	}
	floorProc, floorAddr, err := startFloorProcess(ctx, e, sz.groups, sz.instances, echoAddr)
	if err != nil {
		return err
	}
	defer func() { _ = floorProc.Stop(10 * time.Second) }()
	echo, err := harness.DialEcho(echoAddr)
	if err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	defer echo.Close()
	// The echo frames are as large as CA's NodeGroupForNode request.
	echoSize := proto.Size(&pb.NodeGroupForNodeRequest{Node: seed.Nodes[0]})
	echoPerLoop := min(len(seed.Nodes), 10_000)

	gwConn, err := harness.Dial(gwAddr)
	if err != nil {
		return err
	}
	defer gwConn.Close()
	floorConn, err := harness.Dial(floorAddr)
	if err != nil {
		return err
	}
	defer floorConn.Close()
	gw, fl := harness.NewCALoop(gwConn), harness.NewCALoop(floorConn)

	// Warm-up (connections, caches, the allocator) also checks every answer.
	if err := gw.Run(seed.Nodes, seed.Want); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if err := fl.Run(seed.Nodes, seed.Want); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	gw.Reset()
	fl.Reset()
	var gcBefore runtime.MemStats
	runtime.ReadMemStats(&gcBefore)
	e.progress("B1 %s: %d loops each (gateway loaded %d records, %s, in %s)", size, sz.loops, len(seed.Instances)+len(seed.Groups), mib(seed.Bytes), loaded.Round(time.Millisecond))
	for range sz.loops {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := gw.Run(seed.Nodes, nil); err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
		if err := fl.Run(seed.Nodes, nil); err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		if err := echo.RoundTrips(echoPerLoop, echoSize); err != nil {
			return err
		}
	}
	var gcAfter runtime.MemStats
	runtime.ReadMemStats(&gcAfter)

	r := e.report
	r.add(Result{Scenario: "B1", Size: size, Metric: "gateway initial load (KV to ready)", Value: ms(loaded), Unit: "ms"})
	for _, rpc := range []string{harness.RPCNodeGroupForNode, harness.RPCNodeGroups, harness.RPCTargetSize, harness.RPCGetOptions, harness.RPCRefresh} {
		g, f := harness.Summarize(gw.Latencies[rpc]), harness.Summarize(fl.Latencies[rpc])
		p99 := Result{Scenario: "B1", Size: size, Metric: rpc + " p99", Value: us(g.P99), Unit: "us"}
		if rpc == harness.RPCNodeGroupForNode {
			p99.Target, p99.Met = "<= 150 us", atMost(us(g.P99), us(b1P99Target))
		}
		r.add(Result{Scenario: "B1", Size: size, Metric: rpc + " p50", Value: us(g.P50), Unit: "us"})
		r.add(p99)
		r.add(Result{Scenario: "B1", Size: size, Metric: rpc + " p50 (floor)", Value: us(f.P50), Unit: "us"})
		r.add(Result{Scenario: "B1", Size: size, Metric: rpc + " p99 (floor)", Value: us(f.P99), Unit: "us"})
	}
	ec := harness.Summarize(echo.Latencies)
	r.add(Result{Scenario: "B1", Size: size, Metric: "TCP echo round trip p50 (no gRPC)", Value: us(ec.P50), Unit: "us",
		Note: fmt.Sprintf("%d-byte frames between the same two processes as the floor", echoSize)})
	r.add(Result{Scenario: "B1", Size: size, Metric: "TCP echo round trip p99 (no gRPC)", Value: us(ec.P99), Unit: "us"})
	r.add(Result{Scenario: "B1", Size: size, Metric: "client GCs during the loops", Value: float64(gcAfter.NumGC - gcBefore.NumGC), Unit: "",
		Note: fmt.Sprintf("stop-the-world total %s", time.Duration(gcAfter.PauseTotalNs-gcBefore.PauseTotalNs).Round(time.Microsecond))})
	if m, err := gwProc.Memory(); err == nil {
		r.add(Result{Scenario: "B1", Size: size, Metric: "gateway RSS after the loops", Value: float64(m.RSSKiB) / 1024, Unit: "MiB"})
	}
	gl, fll := median(gw.Loops), median(fl.Loops)
	ratio := float64(gl) / float64(fll)
	r.add(Result{Scenario: "B1", Size: size, Metric: "CA loop (median)", Value: ms(gl), Unit: "ms"})
	r.add(Result{Scenario: "B1", Size: size, Metric: "CA loop (median, floor)", Value: ms(fll), Unit: "ms"})
	loopRatio := Result{Scenario: "B1", Size: size, Metric: "CA loop / floor", Value: ratio, Unit: "x"}
	if sz.instances == b1RatioSize {
		loopRatio.Target, loopRatio.Met = "<= 1.5x", atMost(ratio, b1RatioTarget)
	}
	r.add(loopRatio)
	return nil
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func count(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func mib(b int) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// startGatewayProcess runs the api-gateway binary against natsURL on a
// free port and waits until it is SERVING (its read model loaded).
func startGatewayProcess(ctx context.Context, e *env, natsURL string) (*harness.Process, string, error) {
	bin, err := e.binary(ctx, "api-gateway")
	if err != nil {
		return nil, "", err
	}
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	logFile := filepath.Join(e.tmp, "api-gateway.log")
	p, err := harness.StartProcess("api-gateway", bin, []string{
		"--nats-url", natsURL, "--grpc-addr", addr, "--grpc-insecure", "--rest-addr=", "--health-addr=",
		"--log-level", "warn", "--log-format", "text",
	}, nil, logFile)
	if err != nil {
		return nil, "", err
	}
	if err := harness.WaitGRPCServing(ctx, addr, 5*time.Minute, func() error { return p.ExitedError(logFile) }); err != nil {
		p.Kill()
		return nil, "", err
	}
	return p, addr, nil
}
