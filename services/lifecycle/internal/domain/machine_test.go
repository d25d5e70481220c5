package domain_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	. "github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

var t0 = time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)

func testGroup() NodeGroup {
	return NodeGroup{
		ID: "workers", MinSize: 0, MaxSize: 10, TargetSize: 1,
		Template: InstanceTemplate{Name: "small", Provider: "tencentcloud", Account: "dev", Region: "ap-guangzhou"},
		Hooks: Hooks{
			AfterCreated: &HookSpec{Name: "join", Script: "kubeadm join"},
			BeforeDelete: &HookSpec{Name: "drain", Script: "drain"},
		},
	}
}

func env(now time.Time) Env {
	return Env{Now: now, Group: testGroup(), Policy: DefaultPolicy()}
}

// fixture returns the typical record of an instance in state s: the state
// as the machine itself leaves it, with its command in flight where the
// state has one.
func fixture(s State) Instance {
	in := NewInstance("workers-aaaaaaaaaa", "workers", t0)
	in.StateSince = t0
	switch s {
	case StatePending:
	case StateCreating:
		in.State, in.Attempt, in.BatchID, in.ClientToken = s, 1, "b1", "nodesmith-b1"
		in.InFlight, in.Deadline = true, t0.Add(10*time.Minute)
	case StateCreated:
		in.State, in.Attempt, in.BatchID, in.ClientToken, in.CloudID, in.PrivateIP = s, 3, "b1", "nodesmith-b1", "ins-1", "10.0.0.1"
		in.ProviderID = "externalgrpc://tencentcloud/dev/ap-guangzhou/ins-1"
		in.InFlight, in.Deadline = true, t0.Add(15*time.Minute)
	case StateJoined:
		in = fixture(StateCreated)
		in.State, in.InFlight, in.Deadline = s, false, t0.Add(15*time.Minute)
	case StateRunning:
		in = fixture(StateCreated)
		in.State, in.InFlight, in.Deadline = s, false, time.Time{}
	case StatePendingDeletion:
		in = fixture(StateRunning)
		in.State, in.Released = s, true
	case StateDeleting:
		in = fixture(StatePendingDeletion)
		in.State, in.Attempt, in.InFlight, in.Deadline = s, 5, true, t0.Add(10*time.Minute)
	case StateDeleted:
		in = fixture(StateDeleting)
		in.State, in.InFlight, in.Deadline = s, false, time.Time{}
	}
	return in
}

// events returns every event, carrying the fixture's current attempt where
// events carry one.
func events(in Instance) map[string]Event {
	a := in.Attempt
	return map[string]Event{
		"StartCreate":     StartCreate{BatchID: "b2", ClientToken: "nodesmith-b2"},
		"CloudCreated":    CloudCreated{Attempt: a, BatchID: in.BatchID, CloudID: "ins-9"},
		"CreateFailed":    CloudCreateFailed{Attempt: a, BatchID: in.BatchID, Err: CloudError{Kind: contract.ErrorKindCapacity, Code: "ResourceInsufficient"}},
		"Observed":        CloudObserved{Attempt: a, State: CloudRunning, PrivateIP: "10.0.0.7"},
		"Terminated":      CloudTerminated{Attempt: a},
		"TerminateFailed": CloudTerminateFailed{Attempt: a, Err: CloudError{Kind: contract.ErrorKindTransient, Code: "InternalError"}},
		"AfterCreatedOK":  HookFinished{Attempt: a, Kind: HookAfterCreated, Succeeded: true},
		"BeforeDeleteOK":  HookFinished{Attempt: a, Kind: HookBeforeDelete, Succeeded: true},
		"NodeReady":       NodeReady{NodeName: in.ID},
		"DeleteRequested": DeleteRequested{Reason: "DeleteNodes"},
		"ForceDelete":     DeleteRequested{Reason: "operator", Force: true},
		"Cancel":          Cancel{Reason: "DecreaseTargetSize"},
		"StartDelete":     StartDelete{},
		"TickNothingDue":  Tick{},
		"Retry":           Retry{},
		"VMGone":          VMGone{Reason: "not in inventory"},
		"NodeGone":        NodeGone{NodeName: in.ID},
		"NodeBack":        NodeBack{NodeName: in.ID},
	}
}

// want is the outcome of one (state, event) pair: "invalid", "ignored", or
// the new state, optionally followed by "+<command>" for a newly issued
// command.
var want = map[State]map[string]string{
	StatePending: {
		"StartCreate": "Creating+create", "CloudCreated": "invalid", "CreateFailed": "invalid", "Observed": "invalid",
		"Terminated": "invalid", "TerminateFailed": "invalid", "AfterCreatedOK": "invalid", "BeforeDeleteOK": "invalid",
		"NodeReady": "ignored", "DeleteRequested": "Deleted", "ForceDelete": "Deleted", "Cancel": "Deleted",
		"StartDelete": "invalid", "TickNothingDue": "ignored", "Retry": "invalid", "VMGone": "ignored",
		"NodeGone": "ignored", "NodeBack": "ignored",
	},
	StateCreating: {
		"StartCreate": "invalid", "CloudCreated": "Creating", "CreateFailed": "Creating", "Observed": "invalid",
		"Terminated": "invalid", "TerminateFailed": "invalid", "AfterCreatedOK": "invalid", "BeforeDeleteOK": "invalid",
		"NodeReady": "ignored", "DeleteRequested": "PendingDeletion", "ForceDelete": "Deleting", "Cancel": "invalid",
		"StartDelete": "invalid", "TickNothingDue": "ignored", "Retry": "Creating+create", "VMGone": "ignored",
		"NodeGone": "ignored", "NodeBack": "ignored",
	},
	StateCreated: {
		"StartCreate": "invalid", "CloudCreated": "ignored", "CreateFailed": "ignored", "Observed": "invalid",
		"Terminated": "invalid", "TerminateFailed": "invalid", "AfterCreatedOK": "Joined", "BeforeDeleteOK": "invalid",
		"NodeReady": "ignored", "DeleteRequested": "PendingDeletion", "ForceDelete": "Deleting+terminate", "Cancel": "invalid",
		"StartDelete": "invalid", "TickNothingDue": "ignored", "Retry": "Created+hook", "VMGone": "Deleted",
		"NodeGone": "ignored", "NodeBack": "ignored",
	},
	StateJoined: {
		"StartCreate": "invalid", "CloudCreated": "ignored", "CreateFailed": "ignored", "Observed": "invalid",
		"Terminated": "invalid", "TerminateFailed": "invalid", "AfterCreatedOK": "invalid", "BeforeDeleteOK": "invalid",
		"NodeReady": "Running", "DeleteRequested": "PendingDeletion", "ForceDelete": "Deleting+terminate", "Cancel": "invalid",
		"StartDelete": "invalid", "TickNothingDue": "ignored", "Retry": "invalid", "VMGone": "Deleted",
		"NodeGone": "ignored", "NodeBack": "ignored",
	},
	StateRunning: {
		"StartCreate": "invalid", "CloudCreated": "ignored", "CreateFailed": "ignored", "Observed": "invalid",
		"Terminated": "invalid", "TerminateFailed": "invalid", "AfterCreatedOK": "invalid", "BeforeDeleteOK": "invalid",
		"NodeReady": "ignored", "DeleteRequested": "PendingDeletion", "ForceDelete": "Deleting+terminate", "Cancel": "invalid",
		"StartDelete": "invalid", "TickNothingDue": "ignored", "Retry": "invalid", "VMGone": "Deleted",
		"NodeGone": "Running", "NodeBack": "ignored",
	},
	StatePendingDeletion: {
		"StartCreate": "invalid", "CloudCreated": "ignored", "CreateFailed": "ignored", "Observed": "invalid",
		"Terminated": "invalid", "TerminateFailed": "invalid", "AfterCreatedOK": "invalid", "BeforeDeleteOK": "invalid",
		"NodeReady": "ignored", "DeleteRequested": "ignored", "ForceDelete": "Deleting+terminate", "Cancel": "invalid",
		"StartDelete": "PendingDeletion+hook", "TickNothingDue": "ignored", "Retry": "invalid", "VMGone": "Deleted",
		"NodeGone": "ignored", "NodeBack": "ignored",
	},
	StateDeleting: {
		"StartCreate": "invalid", "CloudCreated": "ignored", "CreateFailed": "ignored", "Observed": "invalid",
		"Terminated": "Deleted", "TerminateFailed": "Deleting", "AfterCreatedOK": "invalid", "BeforeDeleteOK": "invalid",
		"NodeReady": "ignored", "DeleteRequested": "ignored", "ForceDelete": "ignored", "Cancel": "invalid",
		"StartDelete": "invalid", "TickNothingDue": "ignored", "Retry": "Deleting+terminate", "VMGone": "Deleted",
		"NodeGone": "ignored", "NodeBack": "ignored",
	},
	StateDeleted: {
		"StartCreate": "invalid", "CloudCreated": "ignored", "CreateFailed": "ignored", "Observed": "invalid",
		"Terminated": "invalid", "TerminateFailed": "invalid", "AfterCreatedOK": "invalid", "BeforeDeleteOK": "invalid",
		"NodeReady": "ignored", "DeleteRequested": "ignored", "ForceDelete": "ignored", "Cancel": "invalid",
		"StartDelete": "invalid", "TickNothingDue": "ignored", "Retry": "invalid", "VMGone": "ignored",
		"NodeGone": "ignored", "NodeBack": "ignored",
	},
}

func outcome(res Result, err error) string {
	switch {
	case errors.Is(err, ErrInvalidTransition):
		return "invalid"
	case err != nil:
		return "error: " + err.Error()
	case !res.Changed:
		return "ignored"
	}
	s := res.Instance.State.String()
	if res.Command != nil {
		s += "+" + res.Command.Kind.String()
	}
	return s
}

func TestEveryStateEventPair(t *testing.T) {
	if len(want) != len(States) {
		t.Fatalf("table covers %d states, want %d", len(want), len(States))
	}
	for _, st := range States {
		in := fixture(st)
		evs := events(in)
		if len(want[st]) != len(evs) {
			t.Fatalf("%s: table covers %d events, want %d", st, len(want[st]), len(evs))
		}
		for name, ev := range evs {
			t.Run(st.String()+"/"+name, func(t *testing.T) {
				before := fmt.Sprintf("%+v", in)
				res, err := Apply(in, ev, env(t0.Add(time.Second)))
				if got := outcome(res, err); got != want[st][name] {
					t.Errorf("got %s, want %s (ignored: %q)", got, want[st][name], res.Ignored)
				}
				if after := fmt.Sprintf("%+v", in); after != before {
					t.Errorf("Apply mutated its input")
				}
				if err != nil || !res.Changed {
					if fmt.Sprintf("%+v", res.Instance) != before {
						t.Errorf("a refused or ignored event changed the returned record")
					}
					return
				}
				checkInvariants(t, in, res)
			})
		}
	}
}

// checkInvariants holds for every accepted transition.
func checkInvariants(t *testing.T, old Instance, res Result) {
	t.Helper()
	n := res.Instance
	if n.Attempt < old.Attempt {
		t.Errorf("attempt went backwards: %d -> %d", old.Attempt, n.Attempt)
	}
	if res.Command != nil && n.Attempt != old.Attempt+1 {
		t.Errorf("a command was issued without a new attempt: %d -> %d", old.Attempt, n.Attempt)
	}
	if c, ok := PendingCommand(n); ok {
		if c.Kind == CmdRunHook && n.PrivateIP == "" {
			t.Errorf("hook command for an instance without an IP")
		}
		if n.Deadline.IsZero() {
			t.Errorf("in-flight %s without a deadline", c.Kind)
		}
	}
	if n.ProviderID == "" {
		t.Errorf("providerID is empty")
	}
	if n.State != old.State && len(res.Moves) == 0 {
		t.Errorf("state changed without a recorded move")
	}
	if old.Released && !n.Released {
		t.Errorf("an instance was un-released")
	}
	if n.State >= StatePendingDeletion && n.State != StateDeleted && !n.Released {
		t.Errorf("%s instance is not released", n.State)
	}
	if len(n.History) > DefaultPolicy().HistoryLimit {
		t.Errorf("history grew past its limit: %d", len(n.History))
	}
}

// A result for another attempt never changes a record, in any state.
func TestStaleResultsAreIgnored(t *testing.T) {
	for _, st := range States {
		in := fixture(st)
		in.Attempt += 2
		stale := in.Attempt - 1
		for _, ev := range []Event{
			CloudCreateFailed{Attempt: stale, Err: CloudError{Kind: contract.ErrorKindCapacity}},
			CloudObserved{Attempt: stale, State: CloudRunning, PrivateIP: "10.0.0.9"},
			CloudTerminated{Attempt: stale},
			CloudTerminateFailed{Attempt: stale},
			HookFinished{Attempt: stale, Kind: HookAfterCreated, Succeeded: true},
			HookFinished{Attempt: stale, Kind: HookBeforeDelete, Succeeded: true},
			CloudCreated{Attempt: stale, BatchID: "other-batch", CloudID: "ins-x"},
		} {
			res, err := Apply(in, ev, env(t0))
			if err != nil || res.Changed {
				t.Errorf("%s: stale %s: changed=%v err=%v", st, EventName(ev), res.Changed, err)
			}
		}
	}
}

func mustApply(t *testing.T, in Instance, ev Event, e Env) Instance {
	t.Helper()
	res, err := Apply(in, ev, e)
	if err != nil {
		t.Fatalf("%s in %s: %v", EventName(ev), in.State, err)
	}
	if !res.Changed {
		t.Fatalf("%s in %s changed nothing: %s", EventName(ev), in.State, res.Ignored)
	}
	return res.Instance
}

func TestHappyPath(t *testing.T) {
	e := env(t0)
	in := NewInstance("workers-aaaaaaaaaa", "workers", t0)
	if in.ProviderID != "nodesmith:///workers/workers-aaaaaaaaaa" {
		t.Fatalf("placeholder providerID = %q", in.ProviderID)
	}
	in = mustApply(t, in, StartCreate{BatchID: "b1", ClientToken: "tok"}, e)
	in = mustApply(t, in, CloudCreated{Attempt: in.Attempt, BatchID: "b1", CloudID: "ins-1"}, e)
	if in.ProviderID != "externalgrpc://tencentcloud/dev/ap-guangzhou/ins-1" {
		t.Errorf("providerID = %q", in.ProviderID)
	}
	if res, _ := Apply(in, CloudObserved{Attempt: in.Attempt, State: CloudPending}, e); res.Changed {
		t.Errorf("PENDING observation changed the record")
	}
	in = mustApply(t, in, CloudObserved{Attempt: in.Attempt, State: CloudRunning, PrivateIP: "10.0.0.1"}, e)
	if in.State != StateCreated || !in.InFlight {
		t.Fatalf("after RUNNING: %s in flight %v", in.State, in.InFlight)
	}
	in = mustApply(t, in, HookFinished{Attempt: in.Attempt, Kind: HookAfterCreated, Succeeded: true, HostKey: "ssh-ed25519 K"}, e)
	if in.State != StateJoined || in.SSHHostKey != "ssh-ed25519 K" {
		t.Fatalf("after hook: %s, host key %q", in.State, in.SSHHostKey)
	}
	res, _ := Apply(in, NodeReady{NodeName: in.ID}, e)
	if len(res.Effects) != 1 || res.Effects[0].Kind != EffectPatchNode {
		t.Errorf("NodeReady effects = %v, want a node patch", res.Effects)
	}
	in = res.Instance
	in = mustApply(t, in, DeleteRequested{Reason: "DeleteNodes"}, e)
	if !in.AwaitingDeletionSlot() {
		t.Fatalf("deletion should wait for a slot")
	}
	in = mustApply(t, in, StartDelete{}, e)
	in = mustApply(t, in, HookFinished{Attempt: in.Attempt, Kind: HookBeforeDelete, Succeeded: true}, e)
	res, _ = Apply(in, CloudTerminated{Attempt: in.Attempt}, e)
	if res.Instance.State != StateDeleted || len(res.Effects) != 1 || res.Effects[0].Kind != EffectDeleteNode {
		t.Errorf("after terminate: %s effects %v", res.Instance.State, res.Effects)
	}
	if got := len(res.Instance.History); got != 8 {
		t.Errorf("history has %d entries, want 8", got)
	}
}

func TestNoClusterModeRunsAfterHook(t *testing.T) {
	e := env(t0)
	e.NoCluster = true
	in := fixture(StateCreated)
	in = mustApply(t, in, HookFinished{Attempt: in.Attempt, Kind: HookAfterCreated, Succeeded: true}, e)
	if in.State != StateRunning {
		t.Errorf("state = %s, want Running", in.State)
	}
}

func TestGroupWithoutHooksSkipsThem(t *testing.T) {
	e := env(t0)
	e.Group.Hooks = Hooks{}
	in := fixture(StateCreating)
	in.CloudID, in.Attempt = "ins-1", 2
	in = mustApply(t, in, CloudObserved{Attempt: 2, State: CloudRunning, PrivateIP: "10.0.0.1"}, e)
	if in.State != StateJoined || !strings.Contains(in.History[len(in.History)-1].Reason, "skipped") {
		t.Errorf("state %s, last reason %q", in.State, in.History[len(in.History)-1].Reason)
	}
	in = fixture(StatePendingDeletion)
	res, err := Apply(in, StartDelete{}, e)
	if err != nil || res.Instance.State != StateDeleting || res.Command == nil || res.Command.Kind != CmdTerminate {
		t.Errorf("StartDelete without hook: %v %+v", err, res.Command)
	}
}

func TestCreateFailures(t *testing.T) {
	tests := []struct {
		name      string
		kind      ErrorKind
		retries   uint32
		wantState State
		wantClass int32
		wantFail  bool
	}{
		{"capacity is class 1", contract.ErrorKindCapacity, 0, StateCreating, ClassOutOfResources, true},
		{"invalid parameters are class 99", contract.ErrorKindInvalidParameters, 0, StateCreating, ClassOther, true},
		{"auth is class 99", contract.ErrorKindAuth, 0, StateCreating, ClassOther, true},
		{"unknown is definitive, class 99", contract.ErrorKindUnknown, 0, StateCreating, ClassOther, true},
		{"throttled is retried with a new batch", contract.ErrorKindThrottled, 0, StatePending, ClassOther, false},
		{"transient is retried", contract.ErrorKindTransient, 2, StatePending, ClassOther, false},
		{"retries exhausted are class 99", contract.ErrorKindTransient, 5, StateCreating, ClassOther, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := fixture(StateCreating)
			in.Retries = tt.retries
			res, err := Apply(in, CloudCreateFailed{Attempt: 1, BatchID: "b1", Err: CloudError{Kind: tt.kind, Code: "X"}}, env(t0))
			if err != nil {
				t.Fatal(err)
			}
			n := res.Instance
			if n.State != tt.wantState || n.CreationFailed != tt.wantFail || res.CreationFailed != tt.wantFail {
				t.Fatalf("state %s failed %v, want %s failed %v", n.State, n.CreationFailed, tt.wantState, tt.wantFail)
			}
			if n.LastError == nil || n.LastError.Class != tt.wantClass {
				t.Errorf("last error %+v, want class %d", n.LastError, tt.wantClass)
			}
			if n.BatchID != "" || n.ClientToken != "" {
				t.Errorf("a definitively failed create must drop its token, got batch %q token %q", n.BatchID, n.ClientToken)
			}
			if n.InFlight {
				t.Errorf("still in flight")
			}
			if !tt.wantFail {
				if !n.NextRetryAt.After(t0) || n.ReadyToCreate(t0) || !n.ReadyToCreate(n.NextRetryAt) {
					t.Errorf("retry not scheduled: next %v", n.NextRetryAt)
				}
				if n.Retries != tt.retries+1 {
					t.Errorf("retries %d, want %d", n.Retries, tt.retries+1)
				}
			}
		})
	}
}

func TestCreateTimeoutRepeatsTheSameToken(t *testing.T) {
	in := fixture(StateCreating)
	late := env(in.Deadline)
	n := mustApply(t, in, Tick{}, late)
	if n.Attempt != 2 || n.BatchID != "b1" || n.ClientToken != "nodesmith-b1" || !n.InFlight {
		t.Fatalf("after timeout: attempt %d batch %q token %q in flight %v", n.Attempt, n.BatchID, n.ClientToken, n.InFlight)
	}
	// A late answer of the first attempt names the same VM: it is taken.
	n = mustApply(t, n, CloudCreated{Attempt: 1, BatchID: "b1", CloudID: "ins-1"}, late)
	if n.CloudID != "ins-1" {
		t.Fatalf("late create result not recorded")
	}
	// Retries exhausted: the creation fails.
	in.Retries = uint32(DefaultPolicy().MaxRetries)
	n = mustApply(t, in, Tick{}, late)
	if !n.CreationFailed || n.LastError.Code != "CreateTimeout" {
		t.Errorf("exhausted: failed %v %+v", n.CreationFailed, n.LastError)
	}
}

func TestLaunchProblems(t *testing.T) {
	watching := fixture(StateCreating)
	watching.CloudID, watching.Attempt = "ins-1", 2
	for _, tt := range []struct {
		st   CloudState
		code string
	}{
		{CloudLaunchFailed, "LaunchFailed"},
		{CloudNotFound, "InstanceNotFound"},
		{CloudStopped, "InstanceSTOPPED"},
	} {
		n := mustApply(t, watching, CloudObserved{Attempt: 2, State: tt.st}, env(t0))
		if !n.CreationFailed || n.LastError.Code != tt.code || n.LastError.Class != ClassOther {
			t.Errorf("%s: failed %v error %+v", tt.st, n.CreationFailed, n.LastError)
		}
	}
	// Running without an IP yet is not progress.
	res, _ := Apply(watching, CloudObserved{Attempt: 2, State: CloudRunning}, env(t0))
	if res.Changed {
		t.Errorf("RUNNING without an IP moved the instance")
	}
	// The launch deadline fails it; a late RUNNING rescues it.
	n := mustApply(t, watching, Tick{}, env(watching.Deadline))
	if !n.CreationFailed || n.LastError.Code != "LaunchTimeout" {
		t.Fatalf("launch timeout: %+v", n.LastError)
	}
	n = mustApply(t, n, CloudObserved{Attempt: 2, State: CloudRunning, PrivateIP: "10.0.0.1"}, env(watching.Deadline))
	if n.CreationFailed || n.State != StateCreated {
		t.Errorf("late RUNNING: %s failed %v", n.State, n.CreationFailed)
	}
}

// A create republished while its instances timed out one by one covers
// them at different attempts, and its watch observes each VM once: an
// observation of an earlier attempt naming the record's own VM is applied
// (also rescuing a launch timeout); one naming no VM or another VM stays
// stale.
func TestEarlierAttemptsObservationOfTheSameVM(t *testing.T) {
	in := fixture(StateCreating)
	in.CloudID, in.Attempt = "ins-1", 2
	n := mustApply(t, in, Tick{}, env(in.Deadline))
	if !n.CreationFailed {
		t.Fatalf("launch timeout did not fail the creation: %+v", n)
	}
	for _, ev := range []CloudObserved{
		{Attempt: 1, State: CloudRunning, PrivateIP: "10.0.0.1"},
		{Attempt: 1, CloudID: "ins-2", State: CloudRunning, PrivateIP: "10.0.0.1"},
	} {
		if res, err := Apply(n, ev, env(in.Deadline)); err != nil || res.Changed {
			t.Errorf("%+v: changed=%v err=%v, want ignored", ev, res.Changed, err)
		}
	}
	n = mustApply(t, n, CloudObserved{Attempt: 1, CloudID: "ins-1", State: CloudRunning, PrivateIP: "10.0.0.1"}, env(in.Deadline))
	if n.CreationFailed || n.State != StateCreated {
		t.Errorf("earlier attempt's RUNNING of the same VM: %s failed %v", n.State, n.CreationFailed)
	}
}

// A VM that failed to launch for want of stock is reported as
// OutOfResources with the cloud's code and reason (naming zone and type),
// which the history keeps; any other reason stays class Other.
func TestLaunchFailedForCapacity(t *testing.T) {
	watching := fixture(StateCreating)
	watching.CloudID, watching.Attempt = "ins-1", 2
	reason := "launch failed in zone ap-guangzhou-3, instance type S5.MEDIUM4: ResourceInsufficient.SpecifiedInstanceType: sold out"
	for _, tt := range []struct {
		name  string
		le    *CloudError
		code  string
		class int32
	}{
		{"capacity", &CloudError{Kind: contract.ErrorKindCapacity, Code: "ResourceInsufficient.SpecifiedInstanceType", Message: reason}, "ResourceInsufficient.SpecifiedInstanceType", ClassOutOfResources},
		{"capacity without a code", &CloudError{Kind: contract.ErrorKindCapacity, Message: reason}, "LaunchFailed", ClassOutOfResources},
		{"another reason", &CloudError{Kind: contract.ErrorKindUnknown, Message: reason}, "LaunchFailed", ClassOther},
	} {
		res, err := Apply(watching, CloudObserved{Attempt: 2, State: CloudLaunchFailed, LaunchError: tt.le}, env(t0))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		n := res.Instance
		if !res.CreationFailed || !n.CreationFailed || n.State != StateCreating || n.LastError.Code != tt.code || n.LastError.Class != tt.class {
			t.Errorf("%s: failed %v state %s error %+v", tt.name, n.CreationFailed, n.State, n.LastError)
		}
		if !strings.Contains(n.LastError.Message, reason) {
			t.Errorf("%s: error message %q lacks the cloud's reason", tt.name, n.LastError.Message)
		}
		last := n.History[len(n.History)-1]
		if last.From != StateCreating || last.To != StateCreating || !strings.Contains(last.Reason, reason) || len(res.Moves) != 0 {
			t.Errorf("%s: history ends %+v, moves %v: want a note of the failure, no move", tt.name, last, res.Moves)
		}
	}
}

func TestHookFailureRetriesThenFails(t *testing.T) {
	e := env(t0)
	in := fixture(StateCreated)
	fail := func(in Instance, retryable bool) Instance {
		return mustApply(t, in, HookFinished{Attempt: in.Attempt, Kind: HookAfterCreated, Retryable: retryable, ExitCode: 1, Error: "boom"}, e)
	}
	n := fail(in, true)
	if n.State != StateCreated || n.InFlight || n.NextRetryAt.IsZero() || n.Retries != 1 {
		t.Fatalf("after a retryable failure: %+v", n)
	}
	// Not due yet: nothing.
	if res, _ := Apply(n, Tick{}, e); res.Changed {
		t.Errorf("tick before the retry is due changed the record")
	}
	res, err := Apply(n, Tick{}, env(n.NextRetryAt))
	if err != nil || res.Command == nil || res.Command.Kind != CmdRunHook || res.Instance.Attempt != in.Attempt+1 {
		t.Fatalf("retry due: %v %+v", err, res.Command)
	}
	// A retry then succeeds.
	n = mustApply(t, res.Instance, HookFinished{Attempt: res.Instance.Attempt, Kind: HookAfterCreated, Succeeded: true}, e)
	if n.State != StateJoined || n.Retries != 0 || n.LastError != nil {
		t.Errorf("after success: %s retries %d err %+v", n.State, n.Retries, n.LastError)
	}
	// Not retryable: creation failed at once.
	n = fail(in, false)
	if !n.CreationFailed || n.LastError.Code != "AfterCreatedHookFailed" {
		t.Errorf("non-retryable: %+v", n.LastError)
	}
	// A hook that never answers counts as a retryable failure.
	n = mustApply(t, in, Tick{}, env(in.Deadline))
	if n.Retries != 1 || n.NextRetryAt.IsZero() {
		t.Errorf("hook deadline: %+v", n)
	}
}

func TestJoinTimeoutThenLateNode(t *testing.T) {
	in := fixture(StateJoined)
	n := mustApply(t, in, Tick{}, env(in.Deadline))
	if !n.CreationFailed || n.LastError.Code != "JoinTimeout" || n.LastError.Class != ClassOther {
		t.Fatalf("join timeout: %+v", n.LastError)
	}
	// Reported until CA deletes it; if the node shows up after all, fine.
	n = mustApply(t, n, NodeReady{NodeName: in.ID}, env(in.Deadline))
	if n.State != StateRunning || n.CreationFailed {
		t.Errorf("late node: %s failed %v", n.State, n.CreationFailed)
	}
}

func TestBeforeDeleteFailure(t *testing.T) {
	started := mustApply(t, fixture(StatePendingDeletion), StartDelete{}, env(t0))
	failed := func(block bool, retries uint32) Instance {
		e := env(t0)
		if block {
			e.Group.Hooks.BeforeDelete.OnFailure = OnFailureBlock
		}
		in := started
		in.Retries = retries
		return mustApply(t, in, HookFinished{Attempt: in.Attempt, Kind: HookBeforeDelete, Retryable: true, ExitCode: 1}, e)
	}
	if n := failed(false, 0); n.State != StatePendingDeletion || n.NextRetryAt.IsZero() {
		t.Errorf("first failure should back off: %s", n.State)
	}
	if n := failed(false, 5); n.State != StateDeleting || !n.InFlight {
		t.Errorf("continue after retries: %s in flight %v", n.State, n.InFlight)
	}
	n := failed(true, 5)
	if n.State != StatePendingDeletion || !n.BlockedOnDeleteHook() || n.AwaitingDeletionSlot() {
		t.Fatalf("block: %s blocked %v", n.State, n.BlockedOnDeleteHook())
	}
	// Blocked until an operator retries or forces it.
	if res, _ := Apply(n, Tick{}, env(t0.Add(time.Hour))); res.Changed {
		t.Errorf("a blocked deletion moved on its own")
	}
	e := env(t0)
	e.Group.Hooks.BeforeDelete.OnFailure = OnFailureBlock
	if r := mustApply(t, n, Retry{}, e); !r.InFlight || r.Attempt != n.Attempt+1 {
		t.Errorf("retry of a blocked deletion: %+v", r)
	}
	if r := mustApply(t, n, DeleteRequested{Force: true}, e); r.State != StateDeleting {
		t.Errorf("force of a blocked deletion: %s", r.State)
	}
}

func TestDeletingWithoutAVM(t *testing.T) {
	// Never got an IP: the hook is skipped, no hook command is sent.
	creating := fixture(StateCreating)
	n := mustApply(t, creating, DeleteRequested{Reason: "DeleteNodes"}, env(t0))
	res, err := Apply(n, StartDelete{}, env(t0))
	if err != nil || res.Instance.State != StateDeleting || res.Command != nil {
		t.Fatalf("start delete of a creating instance: %v %s %+v", err, res.Instance.State, res.Command)
	}
	n = res.Instance
	// The create may still answer: its VM is terminated by id.
	r2, _ := Apply(n, CloudCreated{Attempt: n.Attempt, BatchID: "b1", CloudID: "ins-5"}, env(t0))
	if r2.Instance.CloudID != "ins-5" || r2.Command == nil || r2.Command.Kind != CmdTerminate {
		t.Errorf("late create during deletion: %+v", r2.Command)
	}
	// ... or fail: nothing to delete.
	r3, _ := Apply(n, CloudCreateFailed{Attempt: n.Attempt, BatchID: "b1", Err: CloudError{Kind: contract.ErrorKindCapacity}}, env(t0))
	if r3.Instance.State != StateDeleted {
		t.Errorf("create failed during deletion: %s", r3.Instance.State)
	}
	// ... or never answer: closed after the deadline (the reconciler is the backstop).
	r4, _ := Apply(n, Tick{}, env(n.Deadline))
	if r4.Instance.State != StateDeleted {
		t.Errorf("no create outcome: %s", r4.Instance.State)
	}
	// A failed create without a token: nothing could exist.
	failed := fixture(StateCreating)
	failed = mustApply(t, failed, CloudCreateFailed{Attempt: 1, BatchID: "b1", Err: CloudError{Kind: contract.ErrorKindCapacity}}, env(t0))
	failed = mustApply(t, failed, DeleteRequested{}, env(t0))
	if r, _ := Apply(failed, StartDelete{}, env(t0)); r.Instance.State != StateDeleted {
		t.Errorf("failed create deleted: %s", r.Instance.State)
	}
}

func TestTerminateNeverGivesUp(t *testing.T) {
	in := fixture(StateDeleting)
	in.Retries = 50
	n := mustApply(t, in, CloudTerminateFailed{Attempt: in.Attempt, Err: CloudError{Kind: contract.ErrorKindAuth}}, env(t0))
	if n.State != StateDeleting || n.NextRetryAt.IsZero() || n.NextRetryAt.Sub(t0) > time.Duration(float64(DefaultPolicy().BackoffMax)*1.21) {
		t.Fatalf("terminate failure: %s next %v", n.State, n.NextRetryAt)
	}
	r, _ := Apply(n, Tick{}, env(n.NextRetryAt))
	if r.Command == nil || r.Command.Kind != CmdTerminate {
		t.Errorf("retry due did not re-issue the terminate")
	}
	// Not found counts as done.
	n = mustApply(t, in, CloudTerminateFailed{Attempt: in.Attempt, Err: CloudError{Kind: contract.ErrorKindNotFound}}, env(t0))
	if n.State != StateDeleted {
		t.Errorf("not found: %s", n.State)
	}
	// A lost terminate is re-issued at the deadline.
	r, _ = Apply(in, Tick{}, env(in.Deadline))
	if r.Command == nil || r.Command.Kind != CmdTerminate || r.Instance.Attempt != in.Attempt+1 {
		t.Errorf("terminate deadline: %+v", r.Command)
	}
}

func TestBackoffGrowsAndIsCapped(t *testing.T) {
	p := DefaultPolicy()
	prev := time.Duration(0)
	for i := uint32(0); i < 10; i++ {
		d := p.Backoff(i, 0)
		if d < prev || d > p.BackoffMax {
			t.Errorf("backoff(%d) = %s after %s", i, d, prev)
		}
		prev = d
	}
	if lo, hi := p.Backoff(0, -1), p.Backoff(0, 1); lo >= hi || lo < time.Duration(float64(p.BackoffBase)*0.79) {
		t.Errorf("jitter range [%s, %s]", lo, hi)
	}
}

func TestHistoryIsBounded(t *testing.T) {
	in := fixture(StateDeleting)
	e := env(t0)
	e.Policy.HistoryLimit = 4
	for range 10 {
		in.History = append(in.History, NewTransition(StatePending, StateCreating, "", t0))
	}
	n := mustApply(t, in, CloudTerminated{Attempt: in.Attempt}, e)
	if len(n.History) != 4 || n.History[3].To != StateDeleted {
		t.Errorf("history: %d entries, last %v", len(n.History), n.History[len(n.History)-1])
	}
}

func TestPendingCommandIsDerivedFromTheRecord(t *testing.T) {
	for st, want := range map[State]CommandKind{
		StateCreating: CmdCreate, StateCreated: CmdRunHook, StateDeleting: CmdTerminate,
	} {
		c, ok := PendingCommand(fixture(st))
		if !ok || c.Kind != want || c.Attempt != fixture(st).Attempt {
			t.Errorf("%s: command %+v, want %s", st, c, want)
		}
	}
	for _, st := range []State{StatePending, StateJoined, StateRunning, StatePendingDeletion, StateDeleted} {
		if c, ok := PendingCommand(fixture(st)); ok {
			t.Errorf("%s has a command: %+v", st, c)
		}
	}
}

// The policy for a Running instance whose Node someone else deleted: wait
// NodeDeletedGrace for it to register again, then replace the instance
// (terminate its VM without the before_delete hook, target unchanged).
func TestNodeDeletedBySomeoneElse(t *testing.T) {
	grace := DefaultPolicy().NodeDeletedGrace
	type step struct {
		ev    Event
		after time.Duration // since t0
		// want: "ignored" or the state after, with "+lost" while waiting
		// for the Node and "+terminate" when the VM's termination starts.
		want string
	}
	tests := []struct {
		name  string
		grace time.Duration
		steps []step
	}{
		{
			name: "the node registers again within the grace period",
			steps: []step{
				{NodeGone{NodeName: "n"}, 0, "Running+lost"},
				{NodeGone{NodeName: "n"}, time.Minute, "ignored"},
				{Tick{}, grace - time.Second, "ignored"},
				{NodeBack{NodeName: "n"}, grace - time.Second, "Running"},
				{Tick{}, 2 * grace, "ignored"},
			},
		},
		{
			name: "the node stays away: replaced after the grace period",
			steps: []step{
				{NodeGone{NodeName: "n"}, 0, "Running+lost"},
				{Tick{}, grace, "Deleting+terminate"},
				{CloudTerminated{Attempt: 4}, grace + time.Minute, "Deleted"},
			},
		},
		{
			name:  "no grace period: replaced at once",
			grace: -1,
			steps: []step{
				{NodeGone{NodeName: "n"}, 0, "Deleting+terminate"},
			},
		},
		{
			name: "the autoscaler deletes it while waiting: the normal deletion",
			steps: []step{
				{NodeGone{NodeName: "n"}, 0, "Running+lost"},
				{DeleteRequested{Reason: "DeleteNodes"}, time.Minute, "PendingDeletion"},
				{Tick{}, 2 * grace, "ignored"},
			},
		},
		{
			name: "a node back without having been missing changes nothing",
			steps: []step{
				{NodeBack{NodeName: "n"}, 0, "ignored"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := fixture(StateRunning)
			for i, s := range tc.steps {
				e := env(t0.Add(s.after))
				switch {
				case tc.grace < 0:
					e.Policy.NodeDeletedGrace = 0
				case tc.grace > 0:
					e.Policy.NodeDeletedGrace = tc.grace
				}
				res, err := Apply(in, s.ev, e)
				if err != nil {
					t.Fatalf("step %d %s: %v", i, EventName(s.ev), err)
				}
				got := "ignored"
				if res.Changed {
					got = res.Instance.State.String()
					if res.Instance.NodeLost() {
						got += "+lost"
					}
					if res.Command != nil {
						got += "+" + res.Command.Kind.String()
					}
					checkInvariants(t, in, res)
					in = res.Instance
				}
				if got != s.want {
					t.Fatalf("step %d %s: got %s, want %s (ignored: %q)", i, EventName(s.ev), got, s.want, res.Ignored)
				}
				if in.NodeLost() {
					if in.LastError == nil || in.LastError.Code != CodeNodeDeleted {
						t.Errorf("step %d: waiting for the node without the NodeDeleted error: %+v", i, in.LastError)
					}
					if want := t0.Add(grace); !in.Deadline.Equal(want) {
						t.Errorf("step %d: deadline %v, want %v (the grace period from the deletion)", i, in.Deadline, want)
					}
				}
				if res.Changed && in.State == StateDeleting {
					last := in.History[len(in.History)-2]
					if last.To != StatePendingDeletion || !strings.Contains(last.Reason, "node deleted from the cluster") {
						t.Errorf("replacement recorded as %+v", last)
					}
				}
			}
			if in.State == StateRunning && !in.NodeLost() && in.LastError != nil {
				t.Errorf("a Running instance with its node back keeps the error %+v", in.LastError)
			}
		})
	}
}
