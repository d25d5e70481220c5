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
	// rleBursts counts queued RequestLimitExceeded answers.
	rleBursts int
	// events is the injection log.
	events []string

	// afterScaleUp is CA's view once the scale-up settled.
	afterScaleUp map[string]groupView
	// deleted counts instances CA deleted per group; deletedFailed are
	// failed creations among them.
	deleted       map[string]int
	deletedFailed int
}

func newFaults(r *run) *faults { return &faults{r: r, deleted: map[string]int{}} }

func (f *faults) event(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	f.mu.Lock()
	f.events = append(f.events, fmt.Sprintf("%6.1fs %s", time.Since(f.r.start).Seconds(), msg))
	f.mu.Unlock()
	f.r.logf("FAULT %s", msg)
}

// cloudFaultsOn sets the standing cloud faults: errors on a fifth of the
// calls (creates and terminates failing after they took effect, the case
// that tempts a client into duplicates), VMs that never boot, and a zone
// quota only gamma's demand exceeds.
func (f *faults) cloudFaultsOn() {
	e := f.r.w.Emulator
	rate := f.r.cfg.errorRate
	e.SetFaults(cvmemu.ActionRunInstances, cvmemu.ActionFaults{ErrorRate: rate, AfterCommit: true})
	e.SetFaults(cvmemu.ActionDescribeInstances, cvmemu.ActionFaults{ErrorRate: rate})
	e.SetFaults(cvmemu.ActionTerminateInstances, cvmemu.ActionFaults{ErrorRate: rate, AfterCommit: true})
	e.SetLaunchPolicy(cvmemu.LaunchPolicy{HangRate: f.r.cfg.hangRate})
	e.SetQuota(cvmemu.Quota{MaxInstancesPerZone: f.r.cfg.gammaQuota})
	f.event("cloud: %.0f%% InternalError on RunInstances/TerminateInstances (after commit) and DescribeInstances; %.0f%% of VMs never boot; %d instances per zone", 100*rate, 100*f.r.cfg.hangRate, f.r.cfg.gammaQuota)
}

// rleBurst queues n RequestLimitExceeded answers on each action.
func (f *faults) rleBurst(n int, actions ...string) {
	for _, a := range actions {
		fs := make([]cvmemu.Fault, n)
		for i := range fs {
			fs[i] = cvmemu.Fault{Code: "RequestLimitExceeded", Message: "Your current request times exceeds the frequency limit."}
		}
		f.r.w.Emulator.InjectFaults(a, fs...)
	}
	f.mu.Lock()
	f.rleBursts += n * len(actions)
	f.mu.Unlock()
	f.event("burst of %d RequestLimitExceeded on %s", n, strings.Join(actions, ", "))
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
	f.rleBurst(5, cvmemu.ActionRunInstances, cvmemu.ActionDescribeInstances)

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
	f.rleBurst(10, cvmemu.ActionRunInstances, cvmemu.ActionDescribeInstances)

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
	f.rleBurst(10, cvmemu.ActionDescribeInstances)
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
	f.rleBurst(10, cvmemu.ActionTerminateInstances, cvmemu.ActionDescribeInstances)
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
