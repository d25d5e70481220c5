// Command chaos runs nodesmith as separate processes on loopback (two
// lifecycle replicas electing a leader on a Lease of a real kube-apiserver,
// api-gateway, two cloud-adapters, two hook-runners; NATS, the emulator's
// CVM and ECS APIs (three groups on Tencent Cloud, one on Alibaba Cloud),
// SSH-able VMs, the VMs' kubelets and a cloud node controller in
// this process; etcd and kube-apiserver from tools/kube/kubetest) and
// injects faults during a scale-up and a scale-down: kill -9 of the
// lifecycle leader (twice), of a cloud-adapter in the middle of a
// RunInstances (its VMs created, the answer held by a cvmemu.Hold; the
// time until its command reaches the other replica is reported), of the
// other cloud-adapter and of a hook-runner in the middle of hooks; a NATS server restart; 20% cloud API errors (creates
// and terminates failing after they took effect) and bursts of throttling
// on both clouds, each with its own codes (InternalError and
// RequestLimitExceeded for CVM, InternalError and Throttling.User for
// ECS); an exhausted quota; VMs that never boot; hooks that hang; VMs
// whose SSH is unreachable; a stock-out wave on a fifth group's zone
// (refused, then failing at launch; stockout.go); spot reclaims of a
// sixth group's VMs, announced to the node agent through the emulator's
// metadata endpoint, drained and replaced under the scale-up (spot.go).
//
// At the end it checks the invariants: every requested instance is Running
// or reported failed to Cluster Autoscaler, no duplicate VM, no orphan VM
// after a reconcile period, no record lost, targets consistent, and every
// Running instance has exactly one Ready Node with its providerID and its
// group's labels, every leader kill handed the Lease over, no Node remains
// for a deleted VM, the command of the cloud-adapter killed mid-RunInstances
// reached the other replica. -cluster=none runs one lifecycle without Kubernetes
// (and without those Node checks) for machines without etcd. It prints
// a table (fault, injected, survived, lost) and exits non-zero when an
// invariant is violated. `make chaos` runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// config sizes the run.
type config struct {
	// groups are the scale-up per group (alpha: hanging hooks; beta: SSH
	// unreachable; gamma: quota exhausted; ecs: the group on Alibaba
	// Cloud ECS, with the cloud faults in ECS's codes).
	alpha, beta, gamma, ecs int
	// delta is the group the stock-out wave strikes (stockout.go), two
	// creations in flight.
	delta int
	// spot is the spot group's scale-up, spotReclaims how many of its
	// Running VMs the cloud reclaims (spot.go).
	spot, spotReclaims int
	// gammaQuota is the per-zone instance quota (the emulator's quota is
	// the same for every zone: gamma alone asks for more).
	gammaQuota int
	// gammaParallelism keeps gamma's batches small, so the quota cuts a
	// batch boundary instead of failing one large batch.
	gammaParallelism int
	// ecsParallelism splits the ecs group's scale-up into several
	// RunInstances batches, so the faults meet more than one call.
	ecsParallelism int
	// scaleDown is how many Running instances CA deletes (half alpha, half
	// beta); ecsScaleDown how many of the ecs group.
	scaleDown, ecsScaleDown int
	// sshUnreachable is how many beta VMs lose SSH right after booting.
	sshUnreachable int
	// hangRate is the fraction of VMs that never boot.
	hangRate float64
	// errorRate is the fraction of cloud API calls answering InternalError.
	errorRate float64

	launchTimeout, reconcile, orphanGrace time.Duration
	settle                                time.Duration
	keep, plantOrphan                     bool
	// stateLoss runs the state-loss fault after the checks (stateloss.go).
	stateLoss bool
	// kubernetes runs lifecycle against a real kube-apiserver (two
	// replicas, leader election on a Lease); false is -cluster=none.
	kubernetes bool
}

func defaults(quick bool) config {
	c := config{
		alpha: 90, beta: 80, gamma: 130, ecs: 60, delta: 16, ecsParallelism: 10, gammaQuota: 100, gammaParallelism: 10, scaleDown: 150, ecsScaleDown: 30, sshUnreachable: 5, spot: 12, spotReclaims: 4,
		hangRate: 0.02, errorRate: 0.2,
		launchTimeout: 40 * time.Second, reconcile: 15 * time.Second, orphanGrace: 30 * time.Second,
		settle: 8 * time.Minute,
	}
	if quick {
		c.alpha, c.beta, c.gamma, c.ecs, c.gammaQuota, c.gammaParallelism, c.scaleDown, c.ecsScaleDown, c.sshUnreachable = 20, 20, 30, 15, 24, 6, 20, 6, 2
		c.hangRate = 0.05
		c.ecsParallelism = 5
		c.delta = 8
		c.spot, c.spotReclaims = 6, 2
	}
	return c
}

// run is one chaos run.
type run struct {
	cfg        config
	dir        string
	configFile string
	w          *harness.World
	nc         *nats.Conn
	js         jetstream.JetStream
	ca         pb.CloudProviderClient
	gwAddr     string
	// restAddr is the gateway's REST admin API (adminToken).
	restAddr string

	// lifecycles are the lifecycle replicas: two sharing the Lease with
	// -cluster=kubernetes, one with -cluster=none.
	lifecycles []*svc
	gateway    *svc
	cloud      []*svc
	hooks      []*svc
	// cloudHold sits between cloud-adapter-0 and the emulator (served by
	// holdServer), so a fault can kill it in the middle of a RunInstances.
	cloudHold  *cvmemu.Hold
	holdServer *http.Server
	// kube is the Kubernetes side (nil with -cluster=none).
	kube *kubeSide

	faults *faults
	// seen are the instance ids (CA's providerIDs) CA saw at any time.
	seenMu sync.Mutex
	seen   map[string]string // providerID -> group
	start  time.Time
	// crashes are the services' unplanned exits (restarted like kubelet
	// would): not an invariant, but a finding.
	crashMu sync.Mutex
	crashes []string
}

func (r *run) recordCrash(name string, err error, tail string) {
	msg := fmt.Sprintf("%6.1fs %s exited on its own (%v), restarted; its log ended with:\n%s", time.Since(r.start).Seconds(), name, err, indent(tail))
	r.crashMu.Lock()
	r.crashes = append(r.crashes, msg)
	r.crashMu.Unlock()
	r.logf("CRASH %s", msg)
}

func indent(s string) string {
	return "        " + strings.ReplaceAll(s, "\n", "\n        ")
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%6.1fs  %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := realMain(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// realMain returns exit code 2 when an invariant is violated, 1 when the
// run itself failed.
func realMain(ctx context.Context) (int, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "a small run (85 instances, 15 of them on ECS) for a smoke test")
	keep := fs.Bool("keep", false, "keep the run directory (logs, NATS storage, VM sandboxes)")
	plant := fs.Bool("plant-orphan", false, "create a VM behind nodesmith's back on each cloud (CVM and ECS) before the checks (the run must then fail: a check of the checks)")
	stateLoss := fs.Bool("state-loss", true, "after the checks, delete the instances bucket under the fleet and restart both lifecycles: nothing may be terminated during the start-up hold, and after the release through the admin API the old VMs go and the groups are back at target")
	dirFlag := fs.String("dir", "", "run directory (default: a new temporary one)")
	cluster := fs.String("cluster", "kubernetes", `"kubernetes": two lifecycle replicas electing a leader on a Lease of a real kube-apiserver (etcd-server package), Nodes registered on join; "none": one lifecycle in no-cluster mode`)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 1, err
	}
	cfg := defaults(*quick)
	cfg.keep = *keep || *dirFlag != ""
	cfg.plantOrphan = *plant
	cfg.stateLoss = *stateLoss
	switch *cluster {
	case "kubernetes":
		cfg.kubernetes = true
	case "none":
	default:
		return 1, fmt.Errorf(`-cluster=%q: want "kubernetes" or "none"`, *cluster)
	}
	dir := *dirFlag
	if dir == "" {
		d, err := os.MkdirTemp("", "nodesmith-chaos-")
		if err != nil {
			return 1, err
		}
		dir = d
	}
	if !cfg.keep {
		defer os.RemoveAll(dir)
	}
	r := &run{cfg: cfg, dir: dir, seen: map[string]string{}, start: time.Now()}
	r.logf("run directory %s (logs in %s)", dir, filepath.Join(dir, "logs"))
	violations, err := r.run(ctx)
	// After r.run: every replica has stopped, so its log is complete,
	// shutdown included.
	if r.gateway != nil {
		n, permViolations, perr := r.checkPermissions()
		switch {
		case perr != nil && err == nil:
			err = fmt.Errorf("checking the service logs for NATS permissions violations: %w", perr)
		case perr == nil:
			fmt.Printf("\nNATS permissions violations logged by the services: %d (expected 0)\n", n)
			violations = append(violations, permViolations...)
		}
	}
	if err != nil {
		r.logf("FAILED: %v (service logs: %s; run with -keep to keep them)", err, filepath.Join(dir, "logs"))
		return 1, err
	}
	if len(violations) > 0 {
		fmt.Println("\nINVARIANTS VIOLATED:")
		for _, v := range violations {
			fmt.Println("  -", v)
		}
		return 2, fmt.Errorf("%d invariant(s) violated", len(violations))
	}
	fmt.Println("\nall invariants hold")
	return 0, nil
}

func (r *run) run(ctx context.Context) ([]string, error) {
	var err error
	if err := os.MkdirAll(filepath.Join(r.dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	worldLog := slog.New(slog.NewTextHandler(mustCreate(filepath.Join(r.dir, "logs", "world.log")), &slog.HandlerOptions{Level: slog.LevelInfo}))
	natsPort, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	r.w, err = harness.StartWorld(harness.WorldConfig{
		Dir: r.dir, NATSPort: portOfAddr(natsPort), BootDelay: 3 * time.Second, NoCluster: !r.cfg.kubernetes, ReadyDelay: time.Second,
		RateLimits: harness.TencentRateLimits(), Logger: worldLog, ECS: true,
	})
	if err != nil {
		return nil, err
	}
	defer r.w.Close()
	r.faults = newFaults(r)
	kctx, stopKube := context.WithCancel(ctx)
	var kwg sync.WaitGroup
	defer func() { stopKube(); kwg.Wait() }()
	if r.cfg.kubernetes {
		r.logf("starting etcd and kube-apiserver")
		stopAPIServer, err := r.startKube(ctx)
		if err != nil {
			return nil, err
		}
		defer stopAPIServer()
		kwg.Add(2)
		go func() { defer kwg.Done(); r.registerNodes(kctx) }()
		go func() { defer kwg.Done(); r.nodeController(kctx) }()
	}

	r.configFile = filepath.Join(r.dir, "nodegroups.yaml")
	conf, err := spotTemplate(r.groupsConfig())
	if err != nil {
		return nil, fmt.Errorf("the spot group's template: %w", err)
	}
	if err := os.WriteFile(r.configFile, conf, 0o644); err != nil {
		return nil, err
	}
	r.logf("building the four service binaries")
	defer r.stopCloudHold() // before the emulator closes
	if err := r.services(ctx); err != nil {
		return nil, err
	}
	r.logf("starting %d lifecycle, api-gateway, 2 cloud-adapters, 2 hook-runners", len(r.lifecycles))
	if err := r.startAll(ctx); err != nil {
		return nil, err
	}
	defer func() {
		for _, e := range r.stopAll() {
			r.logf("stopping: %v", e)
		}
	}()
	conn, err := harness.Dial(r.gwAddr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	r.ca = pb.NewCloudProviderClient(conn)
	if r.nc, err = r.w.ConnectNATS(natsauth.Lifecycle, nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond)); err != nil {
		return nil, err
	}
	defer r.nc.Close()
	if r.js, err = jetstream.New(r.nc); err != nil {
		return nil, err
	}
	if err := r.waitGroups(ctx); err != nil {
		return nil, err
	}

	mctx, stopMonitor := context.WithCancel(ctx)
	var mwg sync.WaitGroup
	mwg.Add(1)
	go func() { defer mwg.Done(); r.monitor(mctx) }()
	defer func() { stopMonitor(); mwg.Wait() }()

	if err := r.scaleUp(ctx); err != nil {
		return nil, fmt.Errorf("scale-up: %w", err)
	}
	if err := r.scaleDown(ctx); err != nil {
		return nil, fmt.Errorf("scale-down: %w", err)
	}
	r.faults.scaleDownDone.Store(true)
	r.w.Emulator.ClearFaults()
	wait := r.cfg.reconcile + r.cfg.orphanGrace + 10*time.Second
	r.logf("faults off; waiting %s (a reconcile period past the orphan grace) before checking", wait)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(wait):
	}
	for _, s := range r.all() {
		if err := s.supervise(r); err != nil {
			return nil, err
		}
	}
	if r.kube != nil {
		if err := r.kube.cluster.APIServerExited(); err != nil {
			return nil, err
		}
	}
	if r.cfg.plantOrphan {
		ids, err := r.plantOrphans()
		if err != nil {
			return nil, err
		}
		r.logf("planted VMs %s behind nodesmith's back: the orphan check must report them", strings.Join(ids, ", "))
	}
	violations, err := r.check(ctx)
	if err != nil {
		return nil, err
	}
	if r.cfg.stateLoss {
		// After the checks above: the records are lost on purpose.
		stopMonitor()
		r.logf("state loss: deleting the instances bucket under the fleet")
		lossViolations, err := r.runStateLoss(ctx)
		if err != nil {
			return nil, fmt.Errorf("state loss: %w", err)
		}
		violations = append(violations, lossViolations...)
		r.faults.printStateLoss(os.Stdout)
	}
	r.faults.print(os.Stdout)
	return violations, nil
}

// groupsConfig is lifecycle's configuration: three groups in three zones
// of Tencent Cloud, one on Alibaba Cloud ECS.
func (r *run) groupsConfig() []byte {
	// The join of harness.JoinScript (word for word what a real Ubuntu VM
	// runs), skipped when the node has joined already, a hook run again
	// after a lost result: kubeadm would fail its preflight check on
	// /etc/kubernetes/kubelet.conf. On a real VM $SIMVM_SANDBOX is unset;
	// the simulated VMs keep their files under it.
	join := `etc="${SIMVM_SANDBOX:-}/etc"
if [ ! -e "$etc/kubernetes/kubelet.conf" ]; then
  echo "KUBELET_EXTRA_ARGS=--provider-id=$PROVIDER_ID" > "$etc/default/kubelet"
  kubeadm join "$API_SERVER" --node-name "$NODE_NAME" \
    --token "$(cat "$etc/kubeadm/token")" \
    --discovery-token-ca-cert-hash "$(cat "$etc/kubeadm/ca-cert-hash")"
fi`
	// Instance ids end in a random base32 character: about one alpha
	// instance in sixteen hangs in its first hook run.
	hang := `case "$INSTANCE_ID" in *[ab]) if [ ! -e "$HOME/.hung-once" ]; then touch "$HOME/.hung-once"; sleep 3600; fi ;; esac`
	drain := `kubectl drain "$NODE_NAME" --ignore-daemonsets || true; kubeadm reset -f`
	return harness.ConfigYAML([]harness.GroupSpec{
		{ID: "alpha", Max: r.cfg.alpha, Zone: "ap-guangzhou-3", AfterCreated: "set -eu\n" + hang + "\n" + join, AfterCreatedTimeout: 15 * time.Second, BeforeDelete: drain, BeforeDeleteTimeout: 10 * time.Second},
		{ID: "beta", Max: r.cfg.beta, Zone: "ap-guangzhou-4", AfterCreated: "set -eu\n" + join, AfterCreatedTimeout: 15 * time.Second, BeforeDelete: drain, BeforeDeleteTimeout: 10 * time.Second},
		{ID: "gamma", Max: r.cfg.gamma, Zone: "ap-guangzhou-5", AfterCreated: "set -eu\n" + join, AfterCreatedTimeout: 15 * time.Second, BeforeDelete: drain, BeforeDeleteTimeout: 10 * time.Second, CreateParallelism: r.cfg.gammaParallelism},
		{ID: deltaGroup, Max: r.cfg.delta, Zone: deltaZone, AfterCreated: "set -eu\n" + join, AfterCreatedTimeout: 15 * time.Second, BeforeDelete: drain, BeforeDeleteTimeout: 10 * time.Second, CreateParallelism: 2},
		{ID: spotGroup, Max: r.cfg.spot, Zone: spotZone, AfterCreated: "set -eu\n" + join, AfterCreatedTimeout: 15 * time.Second, BeforeDelete: drain, BeforeDeleteTimeout: 10 * time.Second},
		{ID: ecsGroup, Max: r.cfg.ecs, ECS: true, AfterCreated: "set -eu\n" + join, AfterCreatedTimeout: 15 * time.Second, BeforeDelete: drain, BeforeDeleteTimeout: 10 * time.Second, CreateParallelism: r.cfg.ecsParallelism},
	})
}

func (r *run) waitGroups(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := callCA(ctx, func(ctx context.Context) (*pb.NodeGroupsResponse, error) {
			return r.ca.NodeGroups(ctx, &pb.NodeGroupsRequest{})
		})
		if err == nil && len(res.GetNodeGroups()) == len(groupIDs) {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("groups %v", res.GetNodeGroups())
			}
			return fmt.Errorf("lifecycle has not applied its %d groups after 1m: %w", len(groupIDs), err)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// callCA makes one call with CA's 5s deadline.
func callCA[T any](ctx context.Context, f func(ctx context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return f(cctx)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func mustCreate(path string) *os.File {
	f, err := os.Create(path)
	if err != nil {
		return os.Stderr
	}
	return f
}

func portOfAddr(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	var p int
	_, _ = fmt.Sscanf(addr[i+1:], "%d", &p)
	return p
}

var errNotSettled = errors.New("not settled")

// ecsGroup is the group on Alibaba Cloud ECS.
const ecsGroup = "ecs"

// groups in order.
var groupIDs = []string{"alpha", "beta", "gamma", ecsGroup, deltaGroup, spotGroup}

func (r *run) requested(group string) int {
	return map[string]int{"alpha": r.cfg.alpha, "beta": r.cfg.beta, "gamma": r.cfg.gamma, ecsGroup: r.cfg.ecs, deltaGroup: r.cfg.delta, spotGroup: r.cfg.spot}[group]
}

// total is the scale-up of every group.
func (r *run) total() int {
	return r.cfg.alpha + r.cfg.beta + r.cfg.gamma + r.cfg.ecs + r.cfg.delta + r.cfg.spot
}

var _ = cvmemu.ActionRunInstances
