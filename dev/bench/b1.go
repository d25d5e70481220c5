package main

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
)

// B1 targets: NodeGroupForNode p99 from issue #9; the loop against the
// floor from issue 21 (CA's real call mix).
const (
	b1P99Target   = 150 * time.Microsecond
	b1RatioTarget = 1.1
)

// b1Seed makes the seeded state reproducible, and identical in the
// floor process, which rebuilds it.
const b1Seed = 1

// b1RemovePerLoop is the nodes a scale-down loop removes: CA's
// --max-scale-down-parallelism default.
const b1RemovePerLoop = 10

type b1Size struct{ instances, groups, loops, scaleDownLoops int }

func b1Sizes(quick bool) []b1Size {
	if quick {
		return []b1Size{{1_000, 100, 3, 2}, {10_000, 100, 2, 1}}
	}
	return []b1Size{{1_000, 100, 10, 3}, {10_000, 100, 5, 2}, {50_000, 100, 3, 1}}
}

// runB1 seeds the KV buckets with records shaped as lifecycle writes them,
// runs the api-gateway against them (and lifecycle, which DeleteNodes
// needs) and drives CA's loops with CA's call mix over real gRPC on
// loopback; the same loops against a minimal gRPC server answering from
// maps are the floor. Loops alternate between the two so both see the same
// machine noise: first steady loops, then scale-down loops that remove
// nodes.
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
	bus, err := harness.StartBus(ctx, dir)
	if err != nil {
		return err
	}
	defer bus.Close()
	js := bus.JS
	seed := harness.BuildSeed(sz.groups, sz.instances, b1Seed)
	if err := seed.Write(ctx, js); err != nil {
		return err
	}

	if _, err := e.binary(ctx, "api-gateway"); err != nil {
		return err
	}
	start := time.Now()
	gwProc, gwAddr, err := startGatewayProcess(ctx, e, bus)
	if err != nil {
		return err
	}
	defer func() { _ = gwProc.Stop(10 * time.Second) }()
	loaded := time.Since(start)
	// Lifecycle answers the gateway's DeleteNodes; it idles otherwise.
	lc, err := startLifecycleProcess(ctx, e, bus, sz.instances)
	if err != nil {
		return err
	}
	defer func() { _ = lc.Stop(10 * time.Second) }()
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
	gw, err := harness.NewCALoop(gwConn, e.caMix)
	if err != nil {
		return err
	}
	fl, err := harness.NewCALoop(floorConn, e.caMix)
	if err != nil {
		return err
	}

	// Warm-up (connections, caches, the allocator) also checks every
	// answer, NodeGroupNodes included (the first loop asks it).
	exp := seed.Expect()
	if err := gw.Run(seed.Nodes, nil, exp); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if err := fl.Run(seed.Nodes, nil, exp); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	gw.Reset()
	fl.Reset()
	var gcBefore runtime.MemStats
	runtime.ReadMemStats(&gcBefore)
	e.progress("B1 %s: %d steady and %d scale-down loops each (gateway loaded %d records, %s, in %s)", size, sz.loops, sz.scaleDownLoops, len(seed.Instances)+len(seed.Groups), mib(seed.Bytes), loaded.Round(time.Millisecond))
	removable := b1Removable(seed)
	// The servers' CPU time per loop, another view than latencies (it
	// counts the runtime's spinning too). Lifecycle's is apart: it works
	// only for DeleteNodes.
	var gwCPU, lcCPU, flCPU []time.Duration
	for i := range sz.loops + sz.scaleDownLoops {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var remove []int
		if i >= sz.loops {
			remove, removable = removable[:b1RemovePerLoop], removable[b1RemovePerLoop:]
		}
		cpu, err := b1CPU(func() error { return gw.Run(seed.Nodes, remove, nil) }, gwProc, lc.Process)
		if err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
		gwCPU, lcCPU = append(gwCPU, cpu[0]), append(lcCPU, cpu[1])
		if cpu, err = b1CPU(func() error { return fl.Run(seed.Nodes, remove, nil) }, floorProc); err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		flCPU = append(flCPU, cpu[0])
		if err := echo.RoundTrips(echoPerLoop, echoSize); err != nil {
			return err
		}
	}
	var gcAfter runtime.MemStats
	runtime.ReadMemStats(&gcAfter)

	r := e.report
	add := func(res Result) {
		res.Scenario, res.Size = "B1", size
		r.add(res)
	}
	add(Result{Metric: "gateway initial load (KV to ready)", Value: ms(loaded), Unit: "ms"})
	n := sz.loops
	b1Loops(add, "steady loop", gw.Loops[:n], fl.Loops[:n], gwCPU[:n], lcCPU[:n], flCPU[:n])
	b1Loops(add, "scale-down loop", gw.Loops[n:], fl.Loops[n:], gwCPU[n:], lcCPU[n:], flCPU[n:])
	for _, rpc := range harness.RPCs {
		g, f := harness.Summarize(gw.Latencies[rpc]), harness.Summarize(fl.Latencies[rpc])
		switch rpc {
		case harness.RPCNodeGroupForNode, harness.RPCGetOptions:
			p99 := Result{Metric: rpc + " p99", Value: us(g.P99), Unit: "us"}
			if rpc == harness.RPCNodeGroupForNode {
				p99.Target, p99.Met = "<= 150 us", atMost(us(g.P99), us(b1P99Target))
			}
			add(Result{Metric: rpc + " p50", Value: us(g.P50), Unit: "us"})
			add(p99)
			add(Result{Metric: rpc + " p50 (floor)", Value: us(f.P50), Unit: "us"})
			add(Result{Metric: rpc + " p99 (floor)", Value: us(f.P99), Unit: "us"})
		default:
			add(Result{Metric: rpc + " p50", Value: us(g.P50), Unit: "us",
				Note: fmt.Sprintf("floor %.0f us; p99 %.0f us, floor %.0f us; %d calls", us(f.P50), us(g.P99), us(f.P99), g.N)})
		}
	}
	ec := harness.Summarize(echo.Latencies)
	add(Result{Metric: "TCP echo round trip p50 (no gRPC)", Value: us(ec.P50), Unit: "us",
		Note: fmt.Sprintf("%d-byte frames between the same two processes as the floor", echoSize)})
	add(Result{Metric: "TCP echo round trip p99 (no gRPC)", Value: us(ec.P99), Unit: "us"})
	add(Result{Metric: "client GCs during the loops", Value: float64(gcAfter.NumGC - gcBefore.NumGC), Unit: "",
		Note: fmt.Sprintf("stop-the-world total %s", time.Duration(gcAfter.PauseTotalNs-gcBefore.PauseTotalNs).Round(time.Microsecond))})
	if m, err := gwProc.Memory(); err == nil {
		add(Result{Metric: "gateway RSS after the loops", Value: float64(m.RSSKiB) / 1024, Unit: "MiB"})
	}
	return nil
}

// b1Removable lists the managed nodes in the order scale-down loops remove
// them: spread over the cluster, deterministic.
func b1Removable(seed *harness.Seeded) []int {
	var out []int
	for i, g := range seed.Want {
		if g != "" {
			out = append(out, i)
		}
	}
	return out
}

// b1CPU runs loop and returns the CPU time each process used meanwhile.
func b1CPU(loop func() error, procs ...*harness.Process) ([]time.Duration, error) {
	cpu := func() ([]time.Duration, error) {
		out := make([]time.Duration, len(procs))
		for i, p := range procs {
			d, err := p.CPUTime()
			if err != nil {
				return nil, err
			}
			out[i] = d
		}
		return out, nil
	}
	before, err := cpu()
	if err != nil {
		return nil, err
	}
	if err := loop(); err != nil {
		return nil, err
	}
	after, err := cpu()
	if err != nil {
		return nil, err
	}
	for i := range after {
		after[i] -= before[i]
	}
	return after, nil
}

// b1Loops reports one kind of loop: calls per loop, the whole loop and the
// time inside the provider (the sum of the sequential calls' latencies),
// each beside the floor's, with their ratios against the 1.1x target, and
// the servers' CPU time per call.
func b1Loops(add func(Result), kind string, gw, fl []harness.LoopStat, gwCPU, lcCPU, flCPU []time.Duration) {
	if len(gw) == 0 {
		return
	}
	perLoop := map[string]float64{}
	total := 0
	for _, l := range gw {
		for rpc, n := range l.Calls {
			perLoop[rpc] += float64(n) / float64(len(gw))
		}
		total += l.Total()
	}
	var calls []string
	for _, rpc := range harness.RPCs {
		if n := perLoop[rpc]; n > 0 {
			calls = append(calls, fmt.Sprintf("%s %s", rpc, strconv.FormatFloat(math.Round(n*10)/10, 'f', -1, 64)))
		}
	}
	add(Result{Metric: kind + ": calls per loop", Value: float64(total) / float64(len(gw)), Unit: "", Note: strings.Join(calls, ", ") + " (the floor gets the same)"})
	for _, m := range []struct {
		name string
		of   func(harness.LoopStat) time.Duration
	}{
		{"CA " + kind, func(s harness.LoopStat) time.Duration { return s.Wall }},
		{kind + " time in the provider", func(s harness.LoopStat) time.Duration { return s.InProvider }},
	} {
		g, f := medianOf(gw, m.of), medianOf(fl, m.of)
		ratio := float64(g) / float64(f)
		add(Result{Metric: m.name + " (median)", Value: ms(g), Unit: "ms"})
		add(Result{Metric: m.name + " (median, floor)", Value: ms(f), Unit: "ms"})
		add(Result{Metric: m.name + " / floor", Value: ratio, Unit: "x", Target: "<= 1.1x", Met: atMost(ratio, b1RatioTarget)})
	}
	calls1 := time.Duration(total)
	g, l, f := sum(gwCPU), sum(lcCPU), sum(flCPU)
	add(Result{Metric: kind + " gateway CPU per call", Value: us(g / calls1), Unit: "us",
		Note: fmt.Sprintf("floor %.1f us, ratio %.2fx; lifecycle %.1f us (user+system of each process during the loops)", us(f/calls1), float64(g)/float64(f), us(l/calls1))})
}

func sum(ds []time.Duration) time.Duration {
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s
}

func medianOf(loops []harness.LoopStat, of func(harness.LoopStat) time.Duration) time.Duration {
	ds := make([]time.Duration, len(loops))
	for i, l := range loops {
		ds[i] = of(l)
	}
	return median(ds)
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
func startGatewayProcess(ctx context.Context, e *env, bus *harness.Bus, extra ...string) (*harness.Process, string, error) {
	bin, err := e.binary(ctx, "api-gateway")
	if err != nil {
		return nil, "", err
	}
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	logFile := filepath.Join(e.tmp, "api-gateway.log")
	natsArgs, err := bus.ServiceArgs(e.tmp, natsauth.APIGateway)
	if err != nil {
		return nil, "", err
	}
	p, err := harness.StartProcess("api-gateway", bin, append(append(natsArgs,
		"--grpc-addr", addr, "--grpc-insecure", "--rest-addr=", "--health-addr=",
		"--log-level", "warn", "--log-format", "text",
	), extra...), e.serviceEnv(), logFile)
	if err != nil {
		return nil, "", err
	}
	if err := harness.WaitGRPCServing(ctx, addr, 5*time.Minute, func() error { return p.ExitedError(logFile) }); err != nil {
		p.Kill()
		return nil, "", err
	}
	return p, addr, nil
}
