package domain_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	. "github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// variants returns records of state s in the situations the machine tells
// apart: the fixture, without a VM, waiting for a retry, with a failed
// creation, without a batch, and with a lost Node.
func variants(s State) []Instance {
	base := fixture(s)
	noVM := base
	noVM.CloudID, noVM.ProviderID, noVM.PrivateIP = "", "", ""
	retryDue := base
	retryDue.InFlight, retryDue.Deadline, retryDue.NextRetryAt = false, time.Time{}, t0
	failed := base
	failed.CreationFailed, failed.InFlight, failed.Deadline = true, false, time.Time{}
	failedNoVM := noVM
	failedNoVM.CreationFailed, failedNoVM.InFlight, failedNoVM.Deadline, failedNoVM.BatchID = true, false, time.Time{}, ""
	noBatch := noVM
	noBatch.InFlight, noBatch.Deadline = false, time.Time{}
	lost := base
	lost.Deadline = t0
	lost.LastError = &ErrorInfo{Code: CodeNodeDeleted}
	withVM := base
	withVM.CloudID, withVM.PrivateIP = "ins-1", "10.0.0.1"
	inFlight := base
	inFlight.InFlight, inFlight.Deadline = true, t0.Add(time.Hour)
	inFlightNoVM := noVM
	inFlightNoVM.InFlight, inFlightNoVM.Deadline, inFlightNoVM.BatchID = true, t0.Add(time.Hour), ""
	noVMRetryDue := noVM
	noVMRetryDue.InFlight, noVMRetryDue.Deadline, noVMRetryDue.NextRetryAt = false, time.Time{}, t0
	expired := noVM
	expired.InFlight, expired.Deadline = false, t0
	return []Instance{base, noVM, retryDue, failed, failedNoVM, noBatch, lost,
		withVM, inFlight, inFlightNoVM, noVMRetryDue, expired}
}

// envs returns the environments the machine tells apart: the usual one,
// without a cluster, without hooks, long after every deadline, and with no
// grace for a deleted Node.
func envs() []Env {
	usual := env(t0.Add(time.Second))
	noCluster := usual
	noCluster.NoCluster = true
	noHooks := usual
	noHooks.Group.Hooks = Hooks{}
	bare := noCluster
	bare.Group.Hooks = Hooks{}
	late := env(t0.Add(24 * time.Hour))
	lateBare := bare
	lateBare.Now = late.Now
	noGrace := usual
	noGrace.Policy.NodeDeletedGrace = 0
	return []Env{usual, noCluster, noHooks, bare, late, lateBare, noGrace}
}

// sweepEvents adds to events the outcomes events leaves out: failed hooks.
func sweepEvents(in Instance) map[string]Event {
	evs := events(in)
	evs["AfterCreatedFailed"] = HookFinished{Attempt: in.Attempt, Kind: HookAfterCreated, Error: "boom"}
	evs["CreateFailedTransient"] = CloudCreateFailed{Attempt: in.Attempt, BatchID: in.BatchID, Err: CloudError{Kind: contract.ErrorKindTransient}}
	evs["TerminateNotFound"] = CloudTerminateFailed{Attempt: in.Attempt, Err: CloudError{Kind: contract.ErrorKindNotFound}}
	evs["BeforeDeleteFailed"] = HookFinished{Attempt: in.Attempt, Kind: HookBeforeDelete, Error: "boom"}
	return evs
}

// TestTransitionTable runs every event on every state in every situation
// the machine tells apart, and checks that each declared move is made by
// some event it names (the table has no dead entry) and each move made is
// declared (Apply enforces it: an undeclared move is an error here).
func TestTransitionTable(t *testing.T) {
	type key struct {
		from, to State
		event    string
	}
	seen := map[key]bool{}
	for _, st := range States {
		for _, in := range variants(st) {
			for name, ev := range sweepEvents(in) {
				for _, e := range envs() {
					res, err := Apply(in, ev, e)
					if errors.Is(err, ErrUndeclaredMove) || (err != nil && !errors.Is(err, ErrInvalidTransition)) {
						t.Fatalf("%s/%s: %v", st, name, err)
					}
					for _, m := range res.Moves {
						if !Declared(m.From, m.To, m.Cause) {
							t.Errorf("%s/%s: undeclared move %s -> %s on %s", st, name, m.From, m.To, m.Cause)
						}
						seen[key{m.From, m.To, m.Cause}] = true
					}
				}
			}
		}
	}
	for _, r := range Transitions {
		for _, ev := range r.Events {
			if !seen[key{r.From, r.To, ev}] {
				t.Errorf("declared move %s -> %s on %s is never made", r.From, r.To, ev)
			}
		}
	}
}
