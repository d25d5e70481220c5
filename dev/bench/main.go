// Command bench measures nodesmith on this machine (issue #9): the CA read
// path against a gRPC floor (B1), orchestration overhead (B2), a realistic
// scale-up against its lower bound (B3), hook-runner horizontal scaling
// (B4), resident memory (B5), and (issue 20) what months of churn cost
// at start (B6) and a leader failover at scale on a Lease (B7). It prints
// a table and writes a JSON report; `make bench` runs it. Numbers come
// from here, never from timed assertions in tests.
//
//	go run ./dev/bench [-scenarios B1,B2,B3,B4,B5,B6,B7] [-quick] [-churn-history N -live N -b6-real-churn N] [-out bench/results.json]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
)

type scenario struct {
	name, what string
	run        func(ctx context.Context, e *env) error
}

var scenarios = []scenario{
	{"B1", "CA's loop (its real call mix) over gRPC vs a minimal gRPC server", runB1},
	{"B2", "orchestration overhead: IncreaseSize to all Running, zero-latency cloud", runB2},
	{"B3", "realistic scale-up vs its lower bound", runB3},
	{"B4", "hook-runner horizontal scaling", runB4},
	{"B5", "resident memory of lifecycle and gateway", runB5},
	{"B6", "months of churn: storage and start times with removed history vs live only", runB6},
	{"B7", "failover at scale: kill -9 the lifecycle leader on a Lease", runB7},
}

// env is what every scenario gets.
type env struct {
	quick   bool
	caMix   harness.CAMix     // B1's CA call mix
	log     *slog.Logger      // the services' logs (warnings and errors by default)
	bins    map[string]string // service binaries by name, built once
	report  *Report
	tmp     string
	verbose bool
	// heapProfile, when set, is the prefix of the heap profiles B5 takes of
	// the lifecycle process (through its --pprof-addr).
	heapProfile string
	// churnHistory and churnLive size B6: removed and live instances.
	churnHistory, churnLive int
	// realChurn is B6's create/delete cycles through the services.
	realChurn int
	// goMemLimit, when set, is the GOMEMLIMIT of the lifecycle and
	// gateway processes B5 to B7 start (the deployment sets one).
	goMemLimit string
	// b5Sizes, when set, replaces B5's instance counts.
	b5Sizes []int

	// b1 are B1's harness options.
	b1 b1Options
}

func (e *env) progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	name, run := "bench", realMain
	if len(os.Args) > 1 && os.Args[1] == "floor" {
		name, run = "bench floor", func(ctx context.Context) error { return floorMain(ctx, os.Args[2:]) }
	}
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

func realMain(ctx context.Context) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var names []string
	for _, s := range scenarios {
		names = append(names, s.name)
	}
	sel := fs.String("scenarios", strings.Join(names, ","), "scenarios to run, comma separated: "+strings.Join(names, ","))
	quick := fs.Bool("quick", false, "small sizes only (a smoke run, not the numbers of record)")
	out := fs.String("out", "bench/results.json", "where the JSON report goes (written atomically)")
	verbose := fs.Bool("v", false, "show the services' info logs")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of each scenario to <this>-<scenario>.pprof (in-process services only)")
	mix := harness.DefaultCAMix()
	fs.IntVar(&mix.OptionsPerNode, "ca-options-per-node", mix.OptionsPerNode, "B1: NodeGroupGetOptions calls per node per CA loop (real CA: 2 to 5)")
	fs.IntVar(&mix.OptionsPerRemovedNode, "ca-options-per-removed-node", mix.OptionsPerRemovedNode, "B1: NodeGroupGetOptions calls per node a scale-down loop removes")
	fs.IntVar(&mix.TargetSizePerGroup, "ca-target-size-per-group", mix.TargetSizePerGroup, "B1: NodeGroupTargetSize calls per group per CA loop")
	fs.IntVar(&mix.NodesEvery, "ca-nodes-every", mix.NodesEvery, "B1: NodeGroupNodes per group every this many CA loops (CA caches instances)")
	var b1 b1Options
	fs.BoolVar(&b1.aa, "b1-aa", false, "B1 as an A/A test: a second floor server, started the way the gateway is, in the gateway's place (a fair harness reads ~1.00x)")
	fs.BoolVar(&b1.check, "b1-aa-check", true, "B1: run a second floor, started the way the gateway is, in the same alternation and report its ratio to the floor (the A/A fairness check)")
	fs.BoolVar(&b1.rotate, "b1-rotate", true, "B1: rotate and reverse the order of the servers across alternation rounds (false: the gateway always first, as before the A/A check)")
	fs.IntVar(&b1.loops, "b1-loops", 0, "B1: steady loops per server at each size (0: the size's default; more loops, tighter ratios)")
	fs.IntVar(&b1.aaWorkers, "b1-aa-stream-workers", 0, "B1 with -b1-aa: floor A serves on this many grpc.NumStreamWorkers (an A/B experiment against the plain floor); 0: gRPC's default")
	heapProfile := fs.String("heapprofile", "", "B5: keep the lifecycle and gateway processes' heap profiles at each size (taken after a GC) in <this>-B5-{lifecycle,api-gateway}-<n>.pprof")
	churnHistory := fs.Int("churn-history", 1_000_000, "B6: instances created and removed before the start (default 20000 with -quick)")
	goMemLimit := fs.String("gomemlimit", "", "B5-B7: GOMEMLIMIT of the lifecycle and gateway processes (e.g. 200MiB; the deployment sets one); empty: none")
	b5Sizes := fs.String("b5-sizes", "", "B5: instance counts to measure, comma separated (default 0,10000,50000,100000; with -quick 0,10000); per-instance figures need 0 first")
	churnLive := fs.Int("live", 100_000, "B6: live instances, in 500 groups (default 5000 with -quick)")
	realChurn := fs.Int("b6-real-churn", 20_000, "B6: create/delete cycles driven through the services, the store's shape then compared with the synthetic one (0: none; default 2000 with -quick)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if err := mix.Validate(); err != nil {
		return err
	}
	want := map[string]bool{}
	for _, n := range strings.Split(*sel, ",") {
		n = strings.ToUpper(strings.TrimSpace(n))
		if n == "" {
			continue
		}
		if !slices.Contains(names, n) {
			return fmt.Errorf("unknown scenario %q (have %s)", n, strings.Join(names, ","))
		}
		want[n] = true
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	tmp, err := os.MkdirTemp("", "nodesmith-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick && !set["churn-history"] {
		*churnHistory = 20_000
	}
	if *quick && !set["live"] {
		*churnLive = 5_000
	}
	if *quick && !set["b6-real-churn"] {
		*realChurn = 2_000
	}
	if *realChurn < 0 {
		return fmt.Errorf("-b6-real-churn must be at least 0, got %d", *realChurn)
	}
	if *churnHistory < 0 || *churnLive < b6Groups {
		return fmt.Errorf("-churn-history must be at least 0 and -live at least %d (one per group)", b6Groups)
	}
	sizes, err := parseSizes(*b5Sizes)
	if err != nil {
		return fmt.Errorf("-b5-sizes: %w", err)
	}
	e := &env{
		b5Sizes: sizes,
		quick:   *quick,
		caMix:   mix,
		verbose: *verbose,
		log:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
		report:  &Report{Started: time.Now().UTC(), Quick: *quick, Machine: describeMachine(), Failures: map[string]string{}, Load: map[string]float64{}},
		tmp:     tmp,

		heapProfile:  *heapProfile,
		churnHistory: *churnHistory,
		churnLive:    *churnLive,
		realChurn:    *realChurn,
		goMemLimit:   *goMemLimit,

		b1: b1,
	}
	for _, s := range scenarios {
		if !want[s.name] {
			continue
		}
		e.report.Scenarios = append(e.report.Scenarios, s.name)
		e.report.Load[s.name] = loadAvg()
		e.progress("%s: %s", s.name, s.what)
		start := time.Now()
		stopProfile, err := startProfile(*cpuProfile, s.name)
		if err != nil {
			return err
		}
		err = s.run(ctx, e)
		stopProfile()
		if err != nil {
			e.report.Failures[s.name] = err.Error()
			e.progress("%s FAILED after %s: %v", s.name, time.Since(start).Round(time.Second), err)
		} else {
			e.progress("%s done in %s", s.name, time.Since(start).Round(time.Second))
		}
		if ctx.Err() != nil {
			break
		}
	}
	e.report.Seconds = time.Since(e.report.Started).Seconds()
	fmt.Println()
	e.report.printTable(os.Stdout)
	if err := e.report.write(*out); err != nil {
		return fmt.Errorf("writing %s: %w", *out, err)
	}
	fmt.Printf("\nwrote %s\n", *out)
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	if len(e.report.Failures) > 0 {
		return fmt.Errorf("%d scenario(s) failed", len(e.report.Failures))
	}
	return nil
}

// binary returns the path of a service command, building all of them on
// first use.
func (e *env) binary(ctx context.Context, name string) (string, error) {
	if e.bins == nil {
		e.progress("building the service binaries")
		bins, err := harness.BuildServices(ctx, filepath.Join(e.tmp, "bin"), harness.Services...)
		if err != nil {
			return "", err
		}
		e.bins = bins
	}
	return e.bins[name], nil
}

// startProfile starts a CPU profile to <prefix>-<name>.pprof; prefix ""
// profiles nothing.
func startProfile(prefix, name string) (func(), error) {
	if prefix == "" {
		return func() {}, nil
	}
	f, err := os.Create(prefix + "-" + name + ".pprof")
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

// serviceEnv is the environment added to a service process.
func (e *env) serviceEnv(extra ...string) []string {
	if e.goMemLimit != "" {
		extra = append(extra, "GOMEMLIMIT="+e.goMemLimit)
	}
	return extra
}

// scratch returns a fresh directory for one run.
func (e *env) scratch(name string) (string, error) {
	return os.MkdirTemp(e.tmp, name+"-")
}
