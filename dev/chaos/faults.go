package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// faults injects the faults and keeps what is needed to judge them.
type faults struct {
	r *run

	scaleUpDone atomic.Bool
	// scaleDownDone: the scale-down settled as CA expected.
	scaleDownDone atomic.Bool
	// caRetries counts CA calls that failed and were retried.
	caRetries atomic.Int64

	mu sync.Mutex
	// sshClosed are the VMs (cloud ids) whose SSH server was stopped.
	sshClosed []string
	// hungHooks are the VMs (cloud ids) whose first hook run hung.
	hungHooks []string
	// hungVMs are the VMs (cloud ids) that never booted.
	hungVMs []string
	// midHook is how many hooks the killed hook-runner was running.
	midHook int
	// midCreate is the kill of a cloud-adapter in the middle of a
	// RunInstances.
	midCreate midCreateKill
	// rleBursts counts queued throttling answers (RequestLimitExceeded
	// on CVM, Throttling.User on ECS).
	rleBursts int
	// events is the injection log.
	events []string

	// spot is the spot reclaims fault (spot.go).
	spot spotFault

	// afterScaleUp is CA's view once the scale-up settled.
	afterScaleUp map[string]groupView
	// deleted counts instances CA deleted per group; deletedFailed are
	// failed creations among them.
	deleted       map[string]int
	deletedFailed int

	// stockOut is what the stock-out wave saw (stockout.go).
	stockOut stockOutWave
	// stockOutStats and stockOutStart are the emulator's counters and the
	// time when the wave began (before the scale-up's first call).
	stockOutStats cvmemu.Stats
	stockOutStart time.Time

	// stateLoss is what the state-loss fault measured (stateloss.go).
	stateLoss stateLoss
}

// midCreateKill is what the kill of a cloud-adapter mid-RunInstances did.
type midCreateKill struct {
	// killed: the process was killed while its call was held.
	killed bool
	// token is the held call's ClientToken; vms how many VMs it had
	// created when the process died.
	token string
	vms   int
	// redelivery is the time from the kill to the next RunInstances with
	// the same ClientToken (the other replica handling the redelivered
	// command); 0 if none came.
	redelivery time.Duration
	// skipped says why the fault was not injected.
	skipped string
}

func newFaults(r *run) *faults { return &faults{r: r, deleted: map[string]int{}} }

func (f *faults) event(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	f.mu.Lock()
	f.events = append(f.events, fmt.Sprintf("%6.1fs %s", time.Since(f.r.start).Seconds(), msg))
	f.mu.Unlock()
	f.r.logf("FAULT %s", msg)
}

// cloudAPI is what the faults need to know of one cloud's API: the
// emulator's scope, its name for terminating VMs and its throttling code.
type cloudAPI struct {
	api                 cvmemu.API
	terminate, throttle string
	throttleMessage     string
}

// cloudAPIs are the two clouds of the run: each gets its faults in its own
// codes (the emulator scopes faults per API, as the actions share names).
var cloudAPIs = []cloudAPI{
	{cvmemu.APICVM, cvmemu.ActionTerminateInstances, cvmemu.CodeRequestLimitExceeded,
		"Your current request times exceeds the frequency limit."},
	{cvmemu.APIECS, cvmemu.ActionDeleteInstances, cvmemu.ECSCodeThrottling,
		"Request was denied due to user flow control."},
}

// throttleCodes are the throttling codes of both clouds.
var throttleCodes = []string{cvmemu.CodeRequestLimitExceeded, cvmemu.ECSCodeThrottling}

// cloudFaultsOn sets the standing cloud faults on both clouds: errors on a
// fifth of the calls (creates and terminates failing after they took
// effect, the case that tempts a client into duplicates), VMs that never
// boot, and a zone quota only gamma's demand exceeds.
func (f *faults) cloudFaultsOn() {
	e := f.r.w.Emulator
	rate := f.r.cfg.errorRate
	for _, c := range cloudAPIs {
		e.SetFaultsFor(c.api, cvmemu.ActionRunInstances, cvmemu.ActionFaults{ErrorRate: rate, AfterCommit: true})
		e.SetFaultsFor(c.api, cvmemu.ActionDescribeInstances, cvmemu.ActionFaults{ErrorRate: rate})
		e.SetFaultsFor(c.api, c.terminate, cvmemu.ActionFaults{ErrorRate: rate, AfterCommit: true})
	}
	e.SetLaunchPolicy(cvmemu.LaunchPolicy{HangRate: f.r.cfg.hangRate})
	e.SetQuota(cvmemu.Quota{MaxInstancesPerZone: f.r.cfg.gammaQuota})
	f.event("cloud: %.0f%% InternalError on RunInstances/TerminateInstances (CVM), RunInstances/DeleteInstances (ECS) (after commit) and DescribeInstances (both); %.0f%% of VMs never boot; %d instances per zone", 100*rate, 100*f.r.cfg.hangRate, f.r.cfg.gammaQuota)
}

// Names of the actions a throttling burst hits, translated per cloud.
const (
	burstRun       = cvmemu.ActionRunInstances
	burstDescribe  = cvmemu.ActionDescribeInstances
	burstTerminate = "terminate" // TerminateInstances, DeleteInstances
)

// rleBurst queues throttling answers on each action of each cloud, in that
// cloud's code (RequestLimitExceeded, Throttling.User): n on CVM, a third
// of n on ECS, whose one group makes a fraction of the calls (a queue of n
// would answer every retry of its few batches until lifecycle's create
// timeout, a test of nothing but patience).
func (f *faults) rleBurst(n int, actions ...string) {
	var names []string
	total := 0
	for _, c := range cloudAPIs {
		k := n
		if c.api == cvmemu.APIECS {
			k = max(1, n/3)
		}
		for _, a := range actions {
			if a == burstTerminate {
				a = c.terminate
			}
			fs := make([]cvmemu.Fault, k)
			for i := range fs {
				fs[i] = cvmemu.Fault{Code: c.throttle, Message: c.throttleMessage}
			}
			f.r.w.Emulator.InjectFaultsFor(c.api, a, fs...)
			names = append(names, fmt.Sprintf("%d on %s %s (%s)", k, c.api, a, c.throttle))
			total += k
		}
	}
	f.mu.Lock()
	f.rleBursts += total
	f.mu.Unlock()
	f.event("burst of throttling answers: %s", strings.Join(names, ", "))
}

// waitFor polls cond every 100ms for up to limit; false on timeout.
func waitFor(ctx context.Context, limit time.Duration, cond func() bool) (bool, error) {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false, nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return false, err
		}
	}
	return true, nil
}

func (f *faults) killAndRestart(ctx context.Context, s *svc, down time.Duration, why string) error {
	s.kill9()
	f.event("kill -9 %s (%s); restart in %s", s.name, why, down)
	if err := sleep(ctx, down); err != nil {
		return err
	}
	return s.restart()
}

// killLifecycleLeader kills the lifecycle replica holding the Lease and
// restarts it 1s later; with Kubernetes it then watches the Lease go to
// another holder (the hand-over the kill is about).
func (f *faults) killLifecycleLeader(ctx context.Context, why string) error {
	s, holder := f.r.leader(ctx)
	if err := f.killAndRestart(ctx, s, time.Second, why); err != nil {
		return err
	}
	if f.r.kube != nil {
		go f.r.watchHandover(ctx, holder, time.Now().Add(-time.Second))
	}
	return nil
}

// midCreateLimit bounds each wait of killMidCreate: for a RunInstances of
// cloud-adapter-0, and for its command to come back after the kill (many
// ack waits).
const midCreateLimit = 2 * time.Minute

// killMidCreate kills cloud-adapter-0 with SIGKILL while one of its
// RunInstances calls has created its VMs and the answer is held, then
// measures how long the command takes to reach the other replica: the
// emulator sees the batch's ClientToken again. cloud-adapter-0 is
// restarted only after that, so the redelivery can only have gone to
// cloud-adapter-1.
func (f *faults) killMidCreate(ctx context.Context) error {
	ca, emu := f.r.cloud[0], f.r.w.Emulator
	call := f.r.cloudHold.Next(cvmemu.ActionRunInstances)
	defer call.Release() // not held yet: pass unheld
	select {
	case <-call.Held():
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(midCreateLimit):
		f.mu.Lock()
		f.midCreate.skipped = fmt.Sprintf("no RunInstances of %s within %s", ca.name, midCreateLimit)
		f.mu.Unlock()
		f.event("kill -9 %s mid-RunInstances skipped: no call of it within %s", ca.name, midCreateLimit)
		return nil
	}
	key := harness.Account + "/" + call.ClientToken()
	uses := func(st cvmemu.Stats) int { return st.ClientTokenCreations[key] + st.ClientTokenReplays[key] }
	before := emu.Stats()
	vms := 0
	for _, vm := range emu.ListVMs() {
		if vm.ClientToken == call.ClientToken() {
			vms++
		}
	}
	ca.kill9()
	killed := time.Now()
	f.event("kill -9 %s mid-RunInstances (token %s: %d VMs created, answer held)", ca.name, call.ClientToken(), vms)
	f.mu.Lock()
	f.midCreate = midCreateKill{killed: true, token: call.ClientToken(), vms: vms}
	f.mu.Unlock()
	select {
	case <-call.ClientGone():
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Second):
		f.r.logf("the held RunInstances of %s still has its client 10s after the kill", ca.name)
	}
	again, err := waitFor(ctx, midCreateLimit, func() bool { return uses(emu.Stats()) > uses(before) })
	if err != nil {
		return err
	}
	if again {
		d := time.Since(killed)
		f.mu.Lock()
		f.midCreate.redelivery = d
		f.mu.Unlock()
		f.event("RunInstances with token %s again %.1fs after the kill (ack wait %s): the command reached %s", call.ClientToken(), d.Seconds(), ackWait, f.r.cloud[1].name)
	} else {
		f.event("RunInstances with token %s not seen again within %s of the kill", call.ClientToken(), midCreateLimit)
	}
	if err := ca.restart(); err != nil {
		return fmt.Errorf("restarting %s: %w", ca.name, err)
	}
	f.event("%s restarted", ca.name)
	return nil
}

// gatewayOK reports whether CA's view through the restarted gateway is
// whole: the scale-down settled through it (targets and instances as CA
// expects), which the run only reaches if every DeleteNodes went through.
func (f *faults) gatewayOK() bool { return f.r.gateway.kills > 0 && f.scaleDownDone.Load() }

// scaleUpSchedule injects the process faults as the scale-up progresses.
func (f *faults) scaleUpSchedule(ctx context.Context, total int) error {
	emu := f.r.w.Emulator
	created := func(frac float64) func() bool {
		return func() bool { return float64(emu.Stats().VMsCreated) >= frac*float64(total) }
	}
	// First, before the throttling burst, so the held call is
	// one that created its VMs.
	if err := f.killMidCreate(ctx); err != nil {
		return err
	}
	f.rleBurst(5, burstRun, burstDescribe)

	running := func(frac float64) func() bool {
		return func() bool {
			n := 0
			for _, g := range groupIDs {
				if v, err := f.r.view(ctx, g); err == nil {
					n += v.running
				}
			}
			return float64(n) >= frac*float64(total)
		}
	}
	if _, err := waitFor(ctx, 3*time.Minute, running(0.1)); err != nil {
		return err
	}
	if err := f.killLifecycleLeader(ctx, "scale-up, 10% of instances Running"); err != nil {
		return err
	}

	if _, err := waitFor(ctx, 3*time.Minute, created(0.5)); err != nil {
		return err
	}
	ca := f.r.cloud[1]
	ca.kill9()
	f.event("kill -9 %s (scale-up, half the VMs created); restart in 10s", ca.name)
	go func() {
		if sleep(ctx, 10*time.Second) == nil {
			if err := ca.restart(); err != nil {
				f.r.logf("restarting %s: %v", ca.name, err)
			}
		}
	}()
	f.rleBurst(10, burstRun, burstDescribe)

	// Kill a hook-runner while it runs hooks: its hooks must run again
	// elsewhere after the ack wait, and never be lost.
	hr := f.r.hooks[1]
	var inFlight float64
	mid, err := waitFor(ctx, 3*time.Minute, func() bool {
		v, err := harness.ScrapeSum(ctx, hr.metrics, "nodesmith_worker_in_flight")
		inFlight = v
		return err == nil && v >= 2
	})
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.midHook = int(inFlight)
	f.mu.Unlock()
	why := fmt.Sprintf("running %d hooks", int(inFlight))
	if !mid {
		why = "no hook seen running within 3m"
	}
	if err := f.killAndRestart(ctx, hr, 5*time.Second, why); err != nil {
		return err
	}

	if _, err := waitFor(ctx, 4*time.Minute, running(0.5)); err != nil {
		return err
	}
	f.event("NATS server restart (down 2s)")
	if err := f.r.w.RestartNATS(2 * time.Second); err != nil {
		return err
	}
	f.rleBurst(10, burstDescribe)
	f.scaleUpDone.Store(true)
	return nil
}

// breakSSH stops the SSH server of beta VMs right after they boot, before
// their hooks reach them (a VM whose sshd never came up, a security group
// blocking port 22).
func (f *faults) breakSSH(ctx context.Context) error {
	emu := f.r.w.Emulator
	seen := map[string]bool{}
	skip := 5 // let a few boot normally first
	for ctx.Err() == nil {
		f.mu.Lock()
		done := len(f.sshClosed) >= f.r.cfg.sshUnreachable
		f.mu.Unlock()
		if done {
			return nil
		}
		for _, vm := range emu.ListVMs() {
			if vm.Zone != "ap-guangzhou-4" || vm.State != cvmemu.StateRunning || seen[vm.ID] {
				continue
			}
			seen[vm.ID] = true
			if skip > 0 {
				skip--
				continue
			}
			guest, ok := emu.Guest(vm.ID)
			if !ok {
				continue
			}
			if err := guest.Close(); err != nil {
				f.r.logf("stopping SSH of %s: %v", vm.ID, err)
				continue
			}
			f.mu.Lock()
			f.sshClosed = append(f.sshClosed, vm.ID)
			n := len(f.sshClosed)
			f.mu.Unlock()
			f.event("SSH of VM %s unreachable (%d/%d)", vm.ID, n, f.r.cfg.sshUnreachable)
			if n >= f.r.cfg.sshUnreachable {
				return nil
			}
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// scaleDownFaults happen halfway through the scale-down.
func (f *faults) scaleDownFaults(ctx context.Context) error {
	f.rleBurst(10, burstTerminate, burstDescribe)
	return f.killLifecycleLeader(ctx, "scale-down, half the DeleteNodes calls made")
}

// countHungHooks finds the VMs whose hook hung once (the marker the hook
// leaves in the VM's home before sleeping).
func (f *faults) countHungHooks() {
	root := f.r.w.VMs.Root()
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hungHooks = nil
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(root, e.Name(), ".hung-once")); err == nil {
			f.hungHooks = append(f.hungHooks, e.Name())
		}
	}
}

// countHungVMs finds the VMs that never booted: still PENDING long after
// the boot delay, once the scale-up settled.
func (f *faults) countHungVMs() {
	var hung []string
	for _, vm := range f.r.w.Emulator.ListVMs() {
		if vm.State == cvmemu.StatePending && time.Since(vm.CreatedAt) > f.r.cfg.launchTimeout {
			hung = append(hung, vm.ID)
		}
	}
	f.mu.Lock()
	f.hungVMs = hung
	f.mu.Unlock()
}

// row is one line of the final table.
type row struct {
	fault                    string
	injected, survived, lost int
	note                     string
}

func printRows(w io.Writer, rows []row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\tinjected\tsurvived\tlost\tnote")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", r.fault, r.injected, r.survived, r.lost, r.note)
	}
	_ = tw.Flush()
}

func (f *faults) print(w io.Writer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintln(w, "\ninjections:")
	for _, e := range f.events {
		fmt.Fprintln(w, "  "+e)
	}
	f.r.crashMu.Lock()
	defer f.r.crashMu.Unlock()
	fmt.Fprintf(w, "\nunplanned service exits (restarted as kubelet would): %d\n", len(f.r.crashes))
	for _, c := range f.r.crashes {
		fmt.Fprintln(w, "  "+c)
	}
}
