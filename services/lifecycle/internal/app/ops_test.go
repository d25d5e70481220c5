package app_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/libs/providerid"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

func TestIncreaseSize(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 5, 0)})
	revs := h.ok(h.app.IncreaseSize(h.ctx, "g", 3))
	if revs.Groups == 0 || revs.Instances == 0 {
		t.Errorf("revisions %+v", revs)
	}
	if h.target("g") != 3 || len(h.instances("g")) != 3 || h.byState("g")[domain.StatePending] != 3 {
		t.Fatalf("target %d, instances %v", h.target("g"), h.byState("g"))
	}
	for _, in := range h.instances("g") {
		if in.ProviderID != providerid.Placeholder("g", in.ID) {
			t.Errorf("providerID %q", in.ProviderID)
		}
	}
	_, err := h.app.IncreaseSize(h.ctx, "g", 3)
	wantCode(t, err, contract.CodeOutOfRange)
	_, err = h.app.IncreaseSize(h.ctx, "g", -1)
	wantCode(t, err, contract.CodeInvalidArgument)
	_, err = h.app.IncreaseSize(h.ctx, "x", 1)
	wantCode(t, err, contract.CodeNotFound)
	if h.target("g") != 3 {
		t.Errorf("a refused increase changed the target")
	}
}

func TestDecreaseTargetSizeCancelsUnregisteredCapacityOnly(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 1, 10, 1)}, withCluster())
	h.ok(h.app.IncreaseSize(h.ctx, "g", 2))
	h.settle() // three Joined, waiting for nodes
	if h.byState("g")[domain.StateJoined] != 3 {
		t.Fatalf("states %v", h.byState("g"))
	}
	// One node registers (not even Ready yet): it must never be cancelled.
	reg := h.instances("g")[0]
	h.cluster.Put(ports.Node{Name: reg.ID, ProviderID: reg.ProviderID})
	eventually(t, func() bool { _, ok := h.app.Node(reg.ID); return ok })
	h.ok(h.app.IncreaseSize(h.ctx, "g", 2)) // two Pending more

	// -3: the two Pending first, then one unregistered Joined.
	h.ok(h.app.DecreaseTargetSize(h.ctx, "g", -3))
	if h.target("g") != 2 {
		t.Errorf("target %d, want 2", h.target("g"))
	}
	st := h.byState("g")
	if st[domain.StateDeleted] != 2 || st[domain.StatePendingDeletion] != 1 || st[domain.StateJoined] != 2 {
		t.Errorf("states %v", st)
	}
	for _, in := range h.instances("g") {
		if in.ID == reg.ID && in.State != domain.StateJoined {
			t.Errorf("the registered instance was released: %s", in.State)
		}
	}
	// Only the registered one is left unreleasable: -1 would need it.
	h.ok(h.app.DecreaseTargetSize(h.ctx, "g", -1))
	_, err := h.app.DecreaseTargetSize(h.ctx, "g", -1)
	wantCode(t, err, contract.CodeOutOfRange) // min size 1
	if h.target("g") != 1 {
		t.Errorf("target %d", h.target("g"))
	}
	_, err = h.app.DecreaseTargetSize(h.ctx, "g", 1)
	wantCode(t, err, contract.CodeInvalidArgument)
}

func TestDecreaseTargetSizeRefusesRegisteredNodes(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 10, 0)})
	h.ok(h.app.IncreaseSize(h.ctx, "g", 2))
	h.settle() // Running (no cluster mode)
	writes := h.store.Writes()
	_, err := h.app.DecreaseTargetSize(h.ctx, "g", -1)
	wantCode(t, err, contract.CodeFailedPrecondition)
	if h.store.Writes() != writes || h.target("g") != 2 {
		t.Errorf("a refused decrease wrote something")
	}
}

func TestDeleteNodes(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 1, 10, 1), group("other", 0, 10, 0)})
	h.ok(h.app.IncreaseSize(h.ctx, "g", 3))
	h.ok(h.app.IncreaseSize(h.ctx, "other", 1))
	h.settle()
	is := h.instances("g")
	foreign := h.instances("other")[0]

	t.Run("unknown node", func(t *testing.T) {
		_, err := h.app.DeleteNodes(h.ctx, "g", []app.NodeRef{{ProviderID: "aws:///nope", Name: "nope"}})
		wantCode(t, err, contract.CodeNotFound)
	})
	t.Run("node of another group fails the whole call", func(t *testing.T) {
		_, err := h.app.DeleteNodes(h.ctx, "g", []app.NodeRef{{ProviderID: is[0].ProviderID}, {ProviderID: foreign.ProviderID}})
		wantCode(t, err, contract.CodeInvalidArgument)
		if h.target("g") != 4 || h.byState("g")[domain.StateRunning] != 4 {
			t.Errorf("a refused call changed something")
		}
	})
	t.Run("resolved by real providerID, placeholder and name", func(t *testing.T) {
		h.ok(h.app.DeleteNodes(h.ctx, "g", []app.NodeRef{
			{ProviderID: is[0].ProviderID},
			{ProviderID: providerid.Placeholder("g", is[1].ID)},
			{Name: is[2].ID},
		}))
		if h.target("g") != 1 {
			t.Errorf("target %d, want 1", h.target("g"))
		}
		// Repeating the call (CA does) is accepted and changes nothing.
		writes := h.store.Writes()
		h.ok(h.app.DeleteNodes(h.ctx, "g", []app.NodeRef{{ProviderID: is[0].ProviderID}}))
		if h.store.Writes() != writes {
			t.Errorf("a repeated DeleteNodes wrote")
		}
	})
	t.Run("never below min size", func(t *testing.T) {
		_, err := h.app.DeleteNodes(h.ctx, "g", []app.NodeRef{{ProviderID: is[3].ProviderID}})
		wantCode(t, err, contract.CodeOutOfRange)
	})
	h.settle()
	if st := h.byState("g"); st[domain.StateDeleted] != 3 || st[domain.StateRunning] != 1 {
		t.Errorf("states %v", st)
	}
}

func TestDeleteNodesReplacesFailedInstancesAtMinSize(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 1, 10, 1)})
	h.app.Pass(h.ctx)
	c := h.cmds.Snapshot().Creates[0]
	h.event(c.Instances[0].InstanceID, domain.CloudCreateFailed{Attempt: c.Instances[0].Attempt, BatchID: c.BatchID,
		Err: domain.CloudError{Kind: contract.ErrorKindCapacity, Code: "ResourceInsufficient"}})
	failed := h.instances("g")[0]
	if !failed.CreationFailed || failed.LastError.Class != domain.ClassOutOfResources {
		t.Fatalf("not failed: %+v", failed)
	}
	// CA deletes the failed instance although the group is at min size:
	// it is replaced, the target stays.
	h.ok(h.app.DeleteNodes(h.ctx, "g", []app.NodeRef{{ProviderID: failed.ProviderID, Name: failed.ProviderID}}))
	if h.target("g") != 1 {
		t.Errorf("target %d, want 1", h.target("g"))
	}
	h.handled.creates = 1
	h.settle()
	st := h.byState("g")
	if st[domain.StateDeleted] != 1 || st[domain.StateRunning] != 1 {
		t.Errorf("states %v", st)
	}
}

// Concurrent operations never break min <= target <= max and never lose an
// update: the final target is the initial one plus every accepted delta.
func TestConcurrentOperationsKeepTheTargetConsistent(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 2, 30, 10)})
	h.settle()
	var (
		mu       sync.Mutex
		accepted = 10
		wg       sync.WaitGroup
	)
	stop, stopped := make(chan struct{}), make(chan struct{})
	// Workers answer in the background while operations race.
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
				h.app.Pass(h.ctx)
			}
		}
	}()
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for range 40 {
				var (
					delta int
					err   error
				)
				switch r.IntN(3) {
				case 0:
					delta = 1 + r.IntN(3)
					_, err = h.app.IncreaseSize(h.ctx, "g", delta)
				case 1:
					delta = -(1 + r.IntN(2))
					_, err = h.app.DecreaseTargetSize(h.ctx, "g", delta)
				case 2:
					is := h.app.Instances("g")
					var live []domain.Instance
					for _, in := range is {
						if in.Live() {
							live = append(live, in)
						}
					}
					if len(live) == 0 {
						continue
					}
					victim := live[r.IntN(len(live))]
					var revs app.Revisions
					revs, err = h.app.DeleteNodes(h.ctx, "g", []app.NodeRef{{ProviderID: victim.ProviderID}})
					// A node already released by a racing call is accepted
					// without a change (no revision written).
					if err == nil && revs.Groups != 0 {
						delta = -1
					}
				}
				mu.Lock()
				if err == nil {
					accepted += delta
				} else {
					switch domain.CodeOf(err) {
					case contract.CodeOutOfRange, contract.CodeFailedPrecondition:
					default:
						t.Errorf("unexpected error: %v", err)
					}
				}
				g, _ := h.app.Group("g")
				if g.TargetSize < g.MinSize || g.TargetSize > g.MaxSize {
					t.Errorf("target %d outside [%d, %d]", g.TargetSize, g.MinSize, g.MaxSize)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-stopped // settle below must not race a pass of this goroutine
	if got := h.target("g"); got != accepted {
		t.Errorf("target %d, want %d (sum of accepted deltas): an update was lost", got, accepted)
	}
	h.settle()
	live := 0
	for _, in := range h.instances("g") {
		if in.Live() {
			live++
		}
	}
	if live != accepted {
		t.Errorf("live instances %d, want the target %d", live, accepted)
	}
	// The store agrees with the cache.
	v, err := h.store.GetGroup(context.Background(), "g")
	if err != nil || v.Group.TargetSize != accepted {
		t.Errorf("stored target %d (%v), want %d", v.Group.TargetSize, err, accepted)
	}
}

func TestOperationsRetryCASConflicts(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 10, 0)})
	// Another writer (an overlapping leader) bumps the group behind the
	// App's back: the App's first write conflicts, it reloads and retries.
	v, _ := h.store.GetGroup(h.ctx, "g")
	v.Group.MaxSize = 8
	if _, err := h.store.UpdateGroup(h.ctx, v.Group, v.Revision); err != nil {
		t.Fatal(err)
	}
	h.ok(h.app.IncreaseSize(h.ctx, "g", 2))
	g, _ := h.store.GetGroup(h.ctx, "g")
	if g.Group.TargetSize != 2 || g.Group.MaxSize != 8 {
		t.Errorf("stored group %+v: the other writer's update was lost or ours not applied", g.Group)
	}
	// A store that keeps conflicting yields Aborted.
	for range h.opts.CASRetries {
		h.store.FailNext(ports.ErrConflict)
	}
	_, err := h.app.IncreaseSize(h.ctx, "g", 1)
	wantCode(t, err, contract.CodeAborted)
	// A store that is down yields Unavailable.
	h.store.FailNext(errors.New("connection refused"))
	_, err = h.app.IncreaseSize(h.ctx, "g", 1)
	wantCode(t, err, contract.CodeUnavailable)
}

func TestInstanceActions(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 10, 2)})
	h.app.Pass(h.ctx)
	is := h.instances("g")
	// Cancel is only for Pending instances.
	wantCode(t, errOnly(h.app.ActOnInstance(h.ctx, is[0].ID, app.ActionCancel)), contract.CodeFailedPrecondition)
	h.settle()
	// Force delete skips the before_delete hook and lowers the target.
	hooks := len(h.cmds.Snapshot().Hooks)
	h.ok(h.app.ActOnInstance(h.ctx, is[0].ID, app.ActionForceDelete))
	if h.target("g") != 1 {
		t.Errorf("target %d", h.target("g"))
	}
	h.settle()
	if len(h.cmds.Snapshot().Hooks) != hooks {
		t.Errorf("a hook ran for a force delete")
	}
	wantCode(t, errOnly(h.app.ActOnInstance(h.ctx, is[0].ID, app.ActionForceDelete)), contract.CodeFailedPrecondition)
	wantCode(t, errOnly(h.app.ActOnInstance(h.ctx, "nope", app.ActionRetry)), contract.CodeNotFound)
	// Retry of a healthy Running instance has nothing to do.
	wantCode(t, errOnly(h.app.ActOnInstance(h.ctx, is[1].ID, app.ActionRetry)), contract.CodeFailedPrecondition)
}

func errOnly(_ app.Revisions, err error) error { return err }

func TestPutAndDeleteGroup(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("file", 0, 10, 0)})
	api := group("api", 0, 5, 2)
	api.Template.Provider = ""
	revs := h.ok(h.app.PutGroup(h.ctx, app.PutGroupRequest{Group: api}))
	g, _ := h.app.Group("api")
	if g.Source != domain.SourceAPI || g.Template.Provider != "tencentcloud" || len(h.instances("api")) != 2 {
		t.Fatalf("api group %+v, %d instances", g, len(h.instances("api")))
	}
	wantCode(t, errOnly(h.app.PutGroup(h.ctx, app.PutGroupRequest{Group: api})), contract.CodeAlreadyExists)
	wantCode(t, errOnly(h.app.PutGroup(h.ctx, app.PutGroupRequest{Group: api, ExpectedRevision: revs.Groups + 100})), contract.CodeAborted)
	// Replacing keeps the runtime target, clamped into new bounds.
	api.MaxSize, api.TargetSize = 1, 0
	h.ok(h.app.PutGroup(h.ctx, app.PutGroupRequest{Group: api, Upsert: true}))
	if h.target("api") != 1 {
		t.Errorf("target %d, want 2 clamped to 1", h.target("api"))
	}
	bad := group("Bad", 3, 1, 0)
	wantCode(t, errOnly(h.app.PutGroup(h.ctx, app.PutGroupRequest{Group: bad})), contract.CodeInvalidArgument)
	// The file owns its groups.
	wantCode(t, errOnly(h.app.PutGroup(h.ctx, app.PutGroupRequest{Group: group("file", 0, 3, 0), Upsert: true})), contract.CodeFailedPrecondition)
	wantCode(t, errOnly(h.app.DeleteGroup(h.ctx, "file", 0)), contract.CodeFailedPrecondition)
	// A group with instances cannot be deleted.
	wantCode(t, errOnly(h.app.DeleteGroup(h.ctx, "api", 0)), contract.CodeFailedPrecondition)
	h.settle()
	// Running nodes are registered: lowering the target cannot remove them.
	wantCode(t, errOnly(h.app.SetTargetSize(h.ctx, "api", 0)), contract.CodeFailedPrecondition)
	wantCode(t, errOnly(h.app.SetTargetSize(h.ctx, "api", 7)), contract.CodeOutOfRange)
	for _, in := range h.instances("api") {
		if in.Live() {
			h.ok(h.app.DeleteNodes(h.ctx, "api", []app.NodeRef{{ProviderID: in.ProviderID}}))
		}
	}
	h.settle()
	h.ok(h.app.DeleteGroup(h.ctx, "api", 0))
	if _, ok := h.app.Group("api"); ok {
		t.Errorf("group still cached")
	}
	if _, err := h.store.GetGroup(h.ctx, "api"); !errors.Is(err, ports.ErrNotFound) {
		t.Errorf("group still stored: %v", err)
	}
}
