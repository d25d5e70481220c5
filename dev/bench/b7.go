package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
	"github.com/nodesmith/nodesmith/dev/kubesim"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
)

// B7's leader election: lifecycle's defaults (client-go's meaning).
const (
	b7Lease      = 15 * time.Second
	b7Renew      = 10 * time.Second
	b7Retry      = 2 * time.Second
	b7LeaseName  = "nodesmith-lifecycle"
	b7GoalExtra  = 5 * time.Second
	b7CAInterval = 250 * time.Millisecond
)

// runB7 measures a failover at scale: two lifecycle replicas electing a
// leader on a Lease of a real kube-apiserver, 100,000 instances (quick:
// 5,000) in 500 groups, a CA-like loop calling IncreaseSize through the
// gateway; the leader is killed with SIGKILL (no Lease release). Measured
// from the kill: the first IncreaseSize that succeeds, and the first
// command the surviving replica's dispatcher publishes, beside the lease
// duration. Goal: both within the lease duration + 5 s.
func runB7(ctx context.Context, e *env) error {
	n := 100_000
	if e.quick {
		n = 5_000
	}
	for _, b := range []string{"lifecycle", "api-gateway"} {
		if _, err := e.binary(ctx, b); err != nil {
			return err
		}
	}
	dir, err := e.scratch("b7")
	if err != nil {
		return err
	}
	kdir := filepath.Join(dir, "kube")
	if err := os.MkdirAll(kdir, 0o755); err != nil {
		return err
	}
	cluster, stopKube, err := kubetest.StartStandalone(ctx, kdir, e.progress)
	if err != nil {
		return fmt.Errorf("starting kube-apiserver: %w", err)
	}
	defer stopKube()
	kubeconfig, err := kubesim.LifecycleAccess(ctx, cluster, b7LeaseName, 24*time.Hour)
	if err != nil {
		return err
	}
	bus, err := harness.StartBus(ctx, dir)
	if err != nil {
		return err
	}
	defer bus.Close()
	seed := harness.BuildSeed(b6Groups, n, 7)
	if err := seed.Write(ctx, bus.JS); err != nil {
		return err
	}
	e.progress("B7 %s instances seeded (%s)", count(n), mib(seed.Bytes))
	gw, addr, err := startGatewayProcess(ctx, e, bus)
	if err != nil {
		return err
	}
	defer func() { _ = gw.Stop(10 * time.Second) }()

	var replicas []*lifecycleProcess
	for i := range 2 {
		name := "lifecycle-" + strconv.Itoa(i)
		lc, err := launchLifecycle(ctx, e, bus, name, []string{"POD_NAME=" + name},
			"--cluster=kubernetes", "--kubeconfig", kubeconfig, "--namespace", kubesim.Namespace, "--cluster-id", "bench",
			"--leader-elect", "--lease-name", b7LeaseName, "--leader-elect-lease-duration", b7Lease.String(),
			"--leader-elect-renew-deadline", b7Renew.String(), "--leader-elect-retry-period", b7Retry.String())
		if err != nil {
			return err
		}
		defer func() { _ = lc.Stop(30 * time.Second) }()
		replicas = append(replicas, lc)
	}
	leader, follower, err := b7Leader(ctx, replicas, n)
	if err != nil {
		return err
	}
	e.progress("B7 %s leads with %s instances loaded; CA-like loop running", leader.Name, count(n))

	conn, err := harness.Dial(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	client := pb.NewCloudProviderClient(conn)
	loop := &b7Loop{client: client, groups: seed.Groups}
	lctx, stopLoop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); loop.run(lctx) }()
	defer func() { stopLoop(); wg.Wait() }()
	// The loop must be served before the kill, or nothing is measured.
	if err := loop.waitSuccess(ctx, time.Now(), time.Minute); err != nil {
		stopLoop()
		return fmt.Errorf("before the kill: %w", err)
	}
	before, err := harness.ScrapeSum(ctx, follower.metrics, "nodesmith_lifecycle_commands_published_total")
	if err != nil {
		before = 0 // not registered until the first command
	}
	cs, err := kubernetes.NewForConfig(cluster.RESTConfig())
	if err != nil {
		return err
	}
	holder := b7Holder(ctx, cs)
	killed := time.Now()
	leader.Kill()
	e.progress("B7 killed %s (SIGKILL)", leader.Name)
	handover := make(chan time.Duration, 1)
	go func() {
		for ctx.Err() == nil && time.Since(killed) < 3*time.Minute {
			if h := b7Holder(ctx, cs); h != "" && h != holder {
				handover <- time.Since(killed)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		handover <- 0
	}()

	var dispatched time.Duration
	deadline := killed.Add(3 * time.Minute)
	for dispatched == 0 {
		got, err := harness.ScrapeSum(ctx, follower.metrics, "nodesmith_lifecycle_commands_published_total")
		if err == nil && got > before {
			dispatched = time.Since(killed)
			break
		}
		if xerr := follower.ExitedError(follower.logFile); xerr != nil {
			return xerr
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s published no command within 3m of the kill", follower.Name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := loop.waitSuccess(ctx, killed, 3*time.Minute); err != nil {
		return fmt.Errorf("after the kill: %w", err)
	}
	served := loop.firstSuccessAfter(killed).Sub(killed)
	took := <-handover
	goal := b7Lease + b7GoalExtra
	size := count(n)
	add := func(r Result) { r.Scenario, r.Size = "B7", size; e.report.add(r) }
	add(Result{Metric: "lease duration", Value: sec(b7Lease), Unit: "s", Note: fmt.Sprintf("renew deadline %s, retry period %s", b7Renew, b7Retry)})
	add(Result{Metric: "kill -9 leader to the Lease changing hands", Value: sec(took), Unit: "s",
		Note: "the survivor loads its state after this"})
	add(Result{Metric: "kill -9 leader to IncreaseSize served", Value: sec(served), Unit: "s",
		Target: fmt.Sprintf("<= %s", goal), Met: atMost(sec(served), sec(goal)),
		Note: fmt.Sprintf("CA-like loop: IncreaseSize every %s", b7CAInterval)})
	add(Result{Metric: "kill -9 leader to dispatcher publishing", Value: sec(dispatched), Unit: "s",
		Target: fmt.Sprintf("<= %s", goal), Met: atMost(sec(dispatched), sec(goal))})
	e.progress("B7 %s: Lease handed over %s, IncreaseSize served %s and dispatcher ran %s after the kill (lease %s)", size,
		took.Round(time.Millisecond), served.Round(time.Millisecond), dispatched.Round(time.Millisecond), b7Lease)
	return nil
}

// b7Holder is the Lease's holder identity ("" when unknown).
func b7Holder(ctx context.Context, cs kubernetes.Interface) string {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := cs.CoordinationV1().Leases(kubesim.Namespace).Get(cctx, b7LeaseName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// b7Leader waits until one replica reports itself leader and counts all
// n instances, and returns it and the other.
func b7Leader(ctx context.Context, replicas []*lifecycleProcess, n int) (leader, follower *lifecycleProcess, err error) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		for i, r := range replicas {
			if xerr := r.ExitedError(r.logFile); xerr != nil {
				return nil, nil, xerr
			}
			l, err1 := harness.ScrapeSum(ctx, r.metrics, "nodesmith_lifecycle_leader")
			got, err2 := harness.ScrapeSum(ctx, r.metrics, "nodesmith_lifecycle_instances")
			if err1 == nil && err2 == nil && l == 1 && int(got) >= n {
				return r, replicas[1-i], nil
			}
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("no lifecycle replica leads with %d instances after 5m", n)
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// b7Loop is the CA-like loop: an IncreaseSize of one node every
// b7CAInterval, round the groups, each call waiting as long as CA's
// would; it keeps when calls succeeded.
type b7Loop struct {
	client pb.CloudProviderClient
	groups []*statev1.NodeGroup

	mu        sync.Mutex
	successes []time.Time
	lastErr   error
}

func (l *b7Loop) run(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		g := l.groups[i%len(l.groups)].GetId()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := l.client.NodeGroupIncreaseSize(cctx, &pb.NodeGroupIncreaseSizeRequest{Id: g, Delta: 1})
		cancel()
		l.mu.Lock()
		if err == nil {
			l.successes = append(l.successes, time.Now())
		} else if status.Code(err) != codes.Canceled {
			l.lastErr = err
		}
		l.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(b7CAInterval):
		}
	}
}

// firstSuccessAfter is when the first call that succeeded after t ended
// (zero if none has).
func (l *b7Loop) firstSuccessAfter(t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.successes {
		if s.After(t) {
			return s
		}
	}
	return time.Time{}
}

// waitSuccess waits for a call to succeed after t.
func (l *b7Loop) waitSuccess(ctx context.Context, t time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for l.firstSuccessAfter(t).IsZero() {
		if time.Now().After(deadline) {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.lastErr == nil {
				return fmt.Errorf("no IncreaseSize succeeded within %s", timeout)
			}
			return fmt.Errorf("no IncreaseSize succeeded within %s: %w", timeout, l.lastErr)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
