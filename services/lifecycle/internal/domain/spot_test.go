package domain_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	. "github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

func spotApply(t *testing.T, in Instance, ev Event, e Env) Result {
	t.Helper()
	res, err := Apply(in, ev, e)
	if err != nil {
		t.Fatalf("%s: %v", EventName(ev), err)
	}
	return res
}

// A spot notice releases a Running instance (the target keeps counting it,
// so it is replaced) and runs the before_delete hook at once, with the
// termination time as its deadline.
func TestSpotInterruptedDrainsWithTheNoticeAsDeadline(t *testing.T) {
	now := t0.Add(time.Second)
	term := now.Add(2 * time.Minute)
	res := spotApply(t, fixture(StateRunning), SpotInterrupted{NodeName: "n1", TerminationTime: term}, env(now))
	in := res.Instance
	if in.State != StatePendingDeletion || !in.Released || !in.InFlight || in.Live() {
		t.Fatalf("state %s released %v inflight %v live %v", in.State, in.Released, in.InFlight, in.Live())
	}
	if !in.Deadline.Equal(term) {
		t.Fatalf("deadline %s, want the termination time %s", in.Deadline, term)
	}
	if res.Command == nil || res.Command.Kind != CmdRunHook || res.Command.Hook != HookBeforeDelete {
		t.Fatalf("command %+v, want the before_delete hook", res.Command)
	}
	if !in.Interrupted() || !strings.HasPrefix(in.History[len(in.History)-1].Reason, ReasonInterrupted) {
		t.Fatalf("history %+v does not say interrupted", in.History)
	}
	if len(res.Moves) != 1 || res.Moves[0].Cause != "SpotInterrupted" {
		t.Fatalf("moves %+v", res.Moves)
	}

	// A repeated notice changes nothing.
	again := spotApply(t, in, SpotInterrupted{NodeName: "n1", TerminationTime: term}, env(now.Add(time.Second)))
	if again.Changed {
		t.Fatalf("a repeated notice changed the record: %+v", again.Instance)
	}

	// The hook fails (or times out at the termination time): no retry, no
	// block, the VM is terminated.
	blocking := env(term)
	blocking.Group.Hooks.BeforeDelete.OnFailure = OnFailureBlock
	out := spotApply(t, in, Tick{}, blocking)
	if out.Instance.State != StateDeleting || !out.Instance.InFlight || out.Command == nil || out.Command.Kind != CmdTerminate {
		t.Fatalf("after the hook's deadline: %s inflight %v command %+v", out.Instance.State, out.Instance.InFlight, out.Command)
	}

	// The cloud already took the VM: terminate answers not found, the
	// record closes with reason interrupted.
	done := spotApply(t, out.Instance, CloudTerminateFailed{Attempt: out.Instance.Attempt, Err: CloudError{Kind: contract.ErrorKindNotFound}}, env(term.Add(time.Second)))
	last := done.Instance.History[len(done.Instance.History)-1]
	if done.Instance.State != StateDeleted || !strings.HasPrefix(last.Reason, ReasonInterrupted) {
		t.Fatalf("closed as %s with reason %q", done.Instance.State, last.Reason)
	}
}

// A hook deadline further than the notice is capped; a notice with
// (almost) no time left skips the hook; a far one keeps the hook's own.
func TestSpotInterruptedHookDeadline(t *testing.T) {
	now := t0.Add(time.Second)
	far := spotApply(t, fixture(StateRunning), SpotInterrupted{TerminationTime: now.Add(time.Hour)}, env(now))
	if want := now.Add(DefaultPolicy().BeforeDeleteHookTimeout); !far.Instance.Deadline.Equal(want) {
		t.Fatalf("far notice: deadline %s, want %s", far.Instance.Deadline, want)
	}
	late := spotApply(t, fixture(StateRunning), SpotInterrupted{TerminationTime: now.Add(time.Second)}, env(now))
	if late.Instance.State != StateDeleting || late.Command == nil || late.Command.Kind != CmdTerminate {
		t.Fatalf("late notice: %s, command %+v", late.Instance.State, late.Command)
	}
}

// The VM vanishing first (the reconciler's VMGone) closes the record with
// reason interrupted; a notice on an instance already being deleted, or
// not yet running, is ignored.
func TestSpotInterruptedVMGoneAndIgnored(t *testing.T) {
	now := t0.Add(time.Second)
	res := spotApply(t, fixture(StateRunning), SpotInterrupted{TerminationTime: now.Add(time.Minute)}, env(now))
	gone := spotApply(t, res.Instance, VMGone{Reason: "not in the inventory"}, env(now.Add(time.Minute)))
	if gone.Instance.State != StateDeleted || !strings.HasPrefix(gone.Instance.History[len(gone.Instance.History)-1].Reason, ReasonInterrupted) {
		t.Fatalf("VM gone: %s %+v", gone.Instance.State, gone.Instance.History)
	}
	for _, s := range []State{StatePending, StateCreating, StatePendingDeletion, StateDeleting, StateDeleted} {
		r := spotApply(t, fixture(s), SpotInterrupted{TerminationTime: now.Add(time.Minute)}, env(now))
		if r.Changed {
			t.Fatalf("%s: a notice changed the record", s)
		}
	}
}
