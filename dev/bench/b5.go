package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
	"github.com/nodesmith/nodesmith/libs/natsauth"
)

// parseSizes parses -b5-sizes: instance counts, comma separated; empty:
// nil (B5's defaults).
func parseSizes(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not an instance count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// b5Groups is how many groups B5's instances are spread over.
const b5Groups = 100

// b5GoalMiB is issue 20's bound on each process's resident memory at
// b5GoalSize instances.
const (
	b5GoalMiB  = 256
	b5GoalSize = 100_000
)

// runB5 measures the resident memory of lifecycle and the api-gateway,
// each its own process built from its cmd/, after loading 0, 10k, 50k and 100k
// instance records (seeded in KV as lifecycle writes them): the gateway
// once SERVING, lifecycle once its gauges count every instance; both
// after a few seconds of settling. RSS is VmRSS from /proc/<pid>/status.
// Each process's Go heap in use (HeapInuse from its pprof server, read
// after a collection forced through it, after RSS) is reported too: it is the live heap, without the garbage and the
// pages not yet returned to the kernel that RSS counts, so it varies less.
func runB5(ctx context.Context, e *env) error {
	sizes := []int{0, 10_000, 50_000, 100_000}
	if e.quick {
		sizes = []int{0, 10_000}
	}
	if e.b5Sizes != nil {
		sizes = e.b5Sizes
	}
	base := map[string]harness.Memory{}
	baseHeap := map[string]float64{}
	for _, n := range sizes {
		mem, heap, err := b5Run(ctx, e, n)
		if err != nil {
			return fmt.Errorf("%d instances: %w", n, err)
		}
		for _, name := range []string{"lifecycle", "api-gateway"} {
			e.report.add(Result{Scenario: "B5", Size: count(n), Metric: name + " Go heap in use", Value: heap[name] / (1 << 20), Unit: "MiB"})
			if n == 0 {
				baseHeap[name] = heap[name]
			} else if _, ok := baseHeap[name]; ok {
				e.report.add(Result{Scenario: "B5", Size: count(n), Metric: name + " Go heap per instance", Value: (heap[name] - baseHeap[name]) / 1024 / float64(n), Unit: "KiB"})
			}
		}
		for _, name := range []string{"lifecycle", "api-gateway"} {
			m := mem[name]
			res := Result{Scenario: "B5", Size: count(n), Metric: name + " RSS", Value: float64(m.RSSKiB) / 1024, Unit: "MiB",
				Note: fmt.Sprintf("peak %.1f MiB", float64(m.HWMKiB)/1024)}
			if e.goMemLimit != "" {
				res.Note += ", GOMEMLIMIT=" + e.goMemLimit
			}
			if n >= b5GoalSize {
				res.Target = fmt.Sprintf("< %d MiB", b5GoalMiB)
				res.Met = atMost(res.Value, b5GoalMiB)
			}
			e.report.add(res)
			if n == 0 {
				base[name] = m
			} else if _, ok := base[name]; ok {
				e.report.add(Result{Scenario: "B5", Size: count(n), Metric: name + " RSS per instance", Value: float64(m.RSSKiB-base[name].RSSKiB) / float64(n), Unit: "KiB"})
			}
		}
	}
	return nil
}

// b5Run measures both processes at n instances: their memory, and
// their Go heap in use in bytes after a collection, by process name.
func b5Run(ctx context.Context, e *env, n int) (map[string]harness.Memory, map[string]float64, error) {
	for _, b := range []string{"lifecycle", "api-gateway"} {
		if _, err := e.binary(ctx, b); err != nil {
			return nil, nil, err
		}
	}
	dir, err := e.scratch("b5")
	if err != nil {
		return nil, nil, err
	}
	bus, err := harness.StartBus(ctx, dir)
	if err != nil {
		return nil, nil, err
	}
	defer bus.Close()
	js := bus.JS
	seed := harness.BuildSeed(b5Groups, n, 5)
	if err := seed.Write(ctx, js); err != nil {
		return nil, nil, err
	}
	e.progress("B5 %s instances seeded (%s)", count(n), mib(seed.Bytes))
	out := map[string]harness.Memory{}

	gwPprof, err := harness.FreeAddr()
	if err != nil {
		return nil, nil, err
	}
	gw, _, err := startGatewayProcess(ctx, e, bus, "--pprof-addr", gwPprof)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = gw.Stop(10 * time.Second) }()

	lc, err := startLifecycleProcess(ctx, e, bus, n)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = lc.Stop(30 * time.Second) }()

	// Let both settle (a few dispatcher passes, a GC cycle or two).
	select {
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-time.After(5 * time.Second):
	}
	for _, p := range []*harness.Process{gw, lc.Process} {
		m, err := p.Memory()
		if err != nil {
			return nil, nil, err
		}
		out[p.Name] = m
	}
	// A heap profile asked with gc=1 runs a collection first: the heap in
	// use it reports (debug=1 ends with runtime.MemStats) is the live
	// heap, not whatever garbage the last cycle left.
	heap := map[string]float64{}
	for name, addr := range map[string]string{"lifecycle": lc.pprof, "api-gateway": "http://" + gwPprof} {
		path := filepath.Join(e.tmp, "b5-heap.pprof")
		if e.heapProfile != "" {
			path = fmt.Sprintf("%s-B5-%s-%d.pprof", e.heapProfile, name, n)
		}
		if err := saveURL(ctx, addr+"/debug/pprof/heap?gc=1", path); err != nil {
			return nil, nil, fmt.Errorf("%s heap profile: %w", name, err)
		}
		if e.heapProfile != "" {
			e.progress("B5 %s heap profile at %s instances: %s", name, count(n), path)
		}
		h, err := heapInuse(ctx, addr)
		if err != nil {
			return nil, nil, fmt.Errorf("%s heap in use: %w", name, err)
		}
		heap[name] = h
	}
	return out, heap, nil
}

// heapInuse returns the HeapInuse bytes a pprof server at base reports
// right after a collection (/debug/pprof/heap?gc=1&debug=1 ends with the
// process's runtime.MemStats).
func heapInuse(ctx context.Context, base string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/debug/pprof/heap?gc=1&debug=1", nil)
	if err != nil {
		return 0, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "# HeapInuse = "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("GET %s: no HeapInuse line", req.URL)
}

// saveURL writes the body of a GET of url to path.
func saveURL(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, res.Status)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// lifecycleProcess is a running lifecycle binary with the URLs of its
// metrics and of its pprof server.
type lifecycleProcess struct {
	*harness.Process
	metrics string // http://host:port/metrics
	pprof   string // http://host:port
	logFile string
	started time.Time // when the process was started
}

// startLifecycleProcess runs the lifecycle binary (see
// launchLifecycleProcess) and waits until its gauges count want
// instances.
func startLifecycleProcess(ctx context.Context, e *env, bus *harness.Bus, want int) (*lifecycleProcess, error) {
	lp, err := launchLifecycleProcess(ctx, e, bus)
	if err != nil {
		return nil, err
	}
	p := lp.Process
	deadline := time.Now().Add(5 * time.Minute)
	for {
		got, err := harness.ScrapeSum(ctx, lp.metrics, "nodesmith_lifecycle_instances")
		if err == nil && int(got) == want {
			return lp, nil
		}
		if xerr := p.ExitedError(lp.logFile); xerr != nil {
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

// launchLifecycleProcess starts the lifecycle binary (no configuration
// file: the seeded groups are API groups; no cluster; no reconciler, as
// there is no cloud-adapter), serving pprof (--pprof-addr) for B5's heap
// profiles, and returns at once.
func launchLifecycleProcess(ctx context.Context, e *env, bus *harness.Bus) (*lifecycleProcess, error) {
	return launchLifecycle(ctx, e, bus, "lifecycle", nil, "--cluster=none")
}

// launchLifecycle starts a lifecycle replica called name (its log file's
// name) with extra arguments and environment, and returns at once.
func launchLifecycle(ctx context.Context, e *env, bus *harness.Bus, name string, env []string, extra ...string) (*lifecycleProcess, error) {
	bin, err := e.binary(ctx, "lifecycle")
	if err != nil {
		return nil, err
	}
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	args, err := bus.ServiceArgs(e.tmp, natsauth.Lifecycle)
	if err != nil {
		return nil, err
	}
	args = append(args, "--health-addr", addr, "--reconcile-interval=0",
		"--log-level", "warn", "--log-format", "text")
	paddr, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	args = append(append(args, "--pprof-addr", paddr), extra...)
	lp := &lifecycleProcess{metrics: "http://" + addr + "/metrics", pprof: "http://" + paddr, logFile: filepath.Join(e.tmp, name+".log")}
	lp.started = time.Now()
	p, err := harness.StartProcess(name, bin, args, e.serviceEnv(env...), lp.logFile)
	if err != nil {
		return nil, err
	}
	lp.Process = p
	return lp, nil
}
