package app_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// spotObs records the spot metrics the App reports.
type spotObs struct {
	app.NopObserver
	mu            sync.Mutex
	interruptions map[string]int
	replacements  []time.Duration
}

func (o *spotObs) SpotInterrupted(group string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.interruptions[group]++
}

func (o *spotObs) SpotReplacementRunning(_ string, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.replacements = append(o.replacements, d)
}

func (o *spotObs) snapshot() (int, []time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.interruptions["g"], append([]time.Duration(nil), o.replacements...)
}

// taintSpot does what the node agent does on a reclaim notice: taint and
// annotate the instance's Node; it waits for the watcher to see it.
func (h *harness) taintSpot(in domain.Instance, term, observed time.Time) {
	h.t.Helper()
	h.cluster.Put(ports.Node{
		Name: in.ID, ProviderID: in.ProviderID, Ready: true,
		Taints: []ports.Taint{{Key: contract.TaintSpotInterruption, Value: "tencent", Effect: contract.TaintSpotInterruptionEffect}},
		Annotations: map[string]string{
			contract.AnnotationSpotTerminationTime:  term.UTC().Format(time.RFC3339),
			contract.AnnotationSpotNoticeObservedAt: observed.UTC().Format(time.RFC3339),
			contract.AnnotationSpotNoticeSource:     "tencent",
		},
	})
	eventually(h.t, func() bool {
		n, _ := h.app.Node(in.ID)
		return len(n.Taints) == 1 && n.Annotations[contract.AnnotationSpotNoticeObservedAt] == observed.UTC().Format(time.RFC3339)
	})
}

// lastHook returns the last hook command recorded for an instance.
func (h *harness) lastHook(id string) (ports.HookCommand, bool) {
	hooks := h.cmds.Snapshot().Hooks
	for i := len(hooks) - 1; i >= 0; i-- {
		if hooks[i].InstanceID == id {
			return hooks[i], true
		}
	}
	return ports.HookCommand{}, false
}

func lastReason(in domain.Instance) string {
	if len(in.History) == 0 {
		return ""
	}
	return in.History[len(in.History)-1].Reason
}

// others returns the group's live instances other than id.
func (h *harness) others(g, id string) []domain.Instance {
	var out []domain.Instance
	for _, x := range h.instances(g) {
		if x.ID != id && x.Live() {
			out = append(out, x)
		}
	}
	return out
}

// A spot notice on a Running instance's Node: the instance is drained
// (before_delete, with the remaining notice as its timeout) and deleted
// with reason interrupted, a replacement starts in the same pass with the
// target unchanged, a repeated notice changes nothing, and the time from
// notice to the replacement Running is measured.
func TestSpotInterruptionDrainsAndReplaces(t *testing.T) {
	obs := &spotObs{interruptions: map[string]int{}}
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 5, 0)}, withCluster(), func(h *harness) { h.obs = obs })
	in := h.runningWithNode("g")
	now := h.clock.Now()
	term := now.Add(2 * time.Minute)
	h.taintSpot(in, term, now.Add(-5*time.Second))
	h.app.Pass(h.ctx)

	got := h.instance(in.ID)
	if got.State != domain.StatePendingDeletion || !got.InFlight || !got.Interrupted() || got.Live() {
		t.Fatalf("interrupted instance: %s in flight %v interrupted %v live %v", got.State, got.InFlight, got.Interrupted(), got.Live())
	}
	if !strings.HasPrefix(lastReason(got), domain.ReasonInterrupted) {
		t.Fatalf("history says %q, want interrupted", lastReason(got))
	}
	if h.target("g") != 1 {
		t.Fatalf("target %d, want 1 (an interruption never lowers it)", h.target("g"))
	}
	// The App woke its dispatcher: the next pass creates the replacement.
	h.app.Pass(h.ctx)
	if repl := h.others("g", in.ID); len(repl) != 1 || repl[0].State > domain.StateCreating {
		t.Fatalf("replacement after the notice's pass: %v", h.byState("g"))
	}
	hk, ok := h.lastHook(in.ID)
	if !ok || hk.Kind != domain.HookBeforeDelete || hk.Attempt != got.Attempt {
		t.Fatalf("no before_delete hook command for the interrupted instance: %+v", hk)
	}
	if hk.Timeout <= 0 || hk.Timeout > term.Sub(now) {
		t.Fatalf("hook timeout %s, want within the %s left", hk.Timeout, term.Sub(now))
	}
	dl, err := time.Parse(time.RFC3339, hk.Env[app.EnvHookDeadline])
	if err != nil || dl.After(term) {
		t.Fatalf("hook deadline %q (%v), want by %s", hk.Env[app.EnvHookDeadline], err, term)
	}
	if n := h.notices.Notices(app.ReasonSpotInterrupted); len(n) != 1 || n[0].Node != in.ID || !n[0].Warning {
		t.Fatalf("spot notices on the Node: %+v", n)
	}

	// The agent re-annotates (a redelivered event): nothing changes.
	h.taintSpot(in, term, now.Add(-4*time.Second))
	h.app.Pass(h.ctx)
	again := h.instance(in.ID)
	if again.Attempt != got.Attempt || len(again.History) != len(got.History) || len(h.instances("g")) != 2 {
		t.Fatalf("a repeated notice changed things: attempt %d->%d, history %d->%d, instances %v",
			got.Attempt, again.Attempt, len(got.History), len(again.History), h.byState("g"))
	}

	// The drain succeeds, the VM is terminated; the replacement runs.
	h.clock.Advance(30 * time.Second)
	h.settle()
	if got := h.instance(in.ID); got.State != domain.StateDeleted || !strings.HasPrefix(lastReason(got), domain.ReasonInterrupted) {
		t.Fatalf("interrupted instance ends %s (%q), want Deleted, interrupted", got.State, lastReason(got))
	}
	repl := h.others("g", in.ID)
	if len(repl) != 1 || repl[0].State != domain.StateJoined {
		t.Fatalf("replacement: %v", h.byState("g"))
	}
	h.cluster.Put(ports.Node{Name: repl[0].ID, ProviderID: repl[0].ProviderID, Ready: true})
	eventually(t, func() bool { n, _ := h.app.Node(repl[0].ID); return n.Ready })
	h.app.Pass(h.ctx)
	if s := h.instance(repl[0].ID).State; s != domain.StateRunning {
		t.Fatalf("replacement %s, want Running", s)
	}
	n, ds := obs.snapshot()
	if n != 1 || len(ds) != 1 || ds[0] != 35*time.Second {
		t.Fatalf("metrics: %d interruptions, replacement times %v; want 1 and [35s]", n, ds)
	}
}

// A restart while the interrupted instance drains changes nothing: the
// record, not the Node event, carries the interruption.
func TestSpotInterruptionSurvivesRestart(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 5, 0)}, withCluster())
	in := h.runningWithNode("g")
	h.taintSpot(in, h.clock.Now().Add(2*time.Minute), h.clock.Now())
	h.app.Pass(h.ctx)
	got := h.instance(in.ID)
	if got.State != domain.StatePendingDeletion {
		t.Fatalf("interrupted instance %s", got.State)
	}
	h.restart(nil)
	h.watch()
	eventually(t, h.app.NodesSynced)
	h.app.Pass(h.ctx)
	after := h.instance(in.ID)
	if after.State != got.State || after.Attempt != got.Attempt || len(after.History) != len(got.History) {
		t.Fatalf("restart changed the interrupted instance: %s/%d/%d -> %s/%d/%d",
			got.State, got.Attempt, len(got.History), after.State, after.Attempt, len(after.History))
	}
	if len(h.instances("g")) != 2 || h.target("g") != 1 {
		t.Fatalf("after the restart: %v, target %d; want the instance and one replacement, target 1", h.byState("g"), h.target("g"))
	}
	// The republished hook command is still capped by the notice.
	if hk, ok := h.lastHook(in.ID); !ok || hk.Timeout > 2*time.Minute || hk.Env[app.EnvHookDeadline] == "" {
		t.Fatalf("hook after the restart: %+v", hk)
	}
}

// The cloud takes the VM before the drain ends: whether the hook times
// out (then terminate answers not found) or the reconciler finds the VM
// gone, the record ends Deleted with reason interrupted, without error
// and without retries.
func TestSpotInterruptionVMGoneFirst(t *testing.T) {
	for _, name := range []string{"hook times out, terminate not found", "reconciler finds the VM gone"} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, []domain.NodeGroup{group("g", 0, 5, 0)}, withCluster())
			in := h.runningWithNode("g")
			term := h.clock.Now().Add(time.Minute)
			h.taintSpot(in, term, h.clock.Now())
			h.app.Pass(h.ctx)
			if name == "reconciler finds the VM gone" {
				h.event(in.ID, domain.VMGone{Reason: "not in the inventory"})
			} else {
				h.clock.Advance(time.Minute)
				h.app.Pass(h.ctx)
				got := h.instance(in.ID)
				if got.State != domain.StateDeleting || !got.InFlight {
					t.Fatalf("after the notice's deadline: %s in flight %v, want Deleting with a terminate command", got.State, got.InFlight)
				}
				h.event(in.ID, domain.CloudTerminateFailed{Attempt: got.Attempt, Err: domain.CloudError{Kind: contract.ErrorKindNotFound, Code: "InvalidInstanceId.NotFound"}})
			}
			h.app.Pass(h.ctx)
			got := h.instance(in.ID)
			if got.State != domain.StateDeleted || got.LastError != nil || got.Retries != 0 || !strings.HasPrefix(lastReason(got), domain.ReasonInterrupted) {
				t.Fatalf("ends %s (%q), error %+v, retries %d; want Deleted, interrupted, no error", got.State, lastReason(got), got.LastError, got.Retries)
			}
			if h.target("g") != 1 || len(h.others("g", in.ID)) != 1 {
				t.Fatalf("target %d, replacement %v", h.target("g"), h.byState("g"))
			}
		})
	}
}

// An instance created before a notice (a scale-up already under way) is
// not the replacement: its Running does not end the notice's wait; the
// replacement's does.
func TestSpotReplacementTimeIsNotTakenFromAnEarlierInstance(t *testing.T) {
	obs := &spotObs{interruptions: map[string]int{}}
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 5, 0)}, withCluster(), func(h *harness) { h.obs = obs })
	in := h.runningWithNode("g")
	h.ok(h.app.IncreaseSize(h.ctx, "g", 1))
	h.settle()
	early := h.others("g", in.ID)
	if len(early) != 1 || early[0].State != domain.StateJoined {
		t.Fatalf("scale-up before the notice: %v", h.byState("g"))
	}

	h.clock.Advance(10 * time.Second)
	h.taintSpot(in, h.clock.Now().Add(2*time.Minute), h.clock.Now())
	h.app.Pass(h.ctx)
	h.settle()
	var repl domain.Instance
	for _, x := range h.others("g", in.ID) {
		if x.ID != early[0].ID {
			repl = x
		}
	}
	if repl.ID == "" || repl.State != domain.StateJoined {
		t.Fatalf("no Joined replacement: %v", h.byState("g"))
	}

	running := func(x domain.Instance) {
		t.Helper()
		h.cluster.Put(ports.Node{Name: x.ID, ProviderID: x.ProviderID, Ready: true})
		eventually(t, func() bool { n, _ := h.app.Node(x.ID); return n.Ready })
		h.app.Pass(h.ctx)
		if s := h.instance(x.ID).State; s != domain.StateRunning {
			t.Fatalf("%s is %s, want Running", x.ID, s)
		}
	}
	h.clock.Advance(5 * time.Second)
	running(early[0])
	if _, ds := obs.snapshot(); len(ds) != 0 {
		t.Fatalf("the earlier instance's Running was taken as the replacement: %v", ds)
	}
	h.clock.Advance(5 * time.Second)
	running(repl)
	if _, ds := obs.snapshot(); len(ds) != 1 || ds[0] != 10*time.Second {
		t.Fatalf("replacement times %v, want [10s]", ds)
	}
}
