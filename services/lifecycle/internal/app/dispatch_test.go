package app_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

func TestBatchesRespectSizeAndParallelism(t *testing.T) {
	g := group("g", 0, 500, 0)
	g.Parallelism.Create = 250
	h := newHarness(t, []domain.NodeGroup{g, group("h", 0, 500, 0)}, withOptions(func(o *app.Options) {
		o.AccountCreateParallelism = 300
	}))
	h.ok(h.app.IncreaseSize(h.ctx, "g", 260))
	h.ok(h.app.IncreaseSize(h.ctx, "h", 100))
	h.app.Pass(h.ctx)
	c := h.cmds.Snapshot()
	perGroup := map[string]int{}
	for _, cr := range c.Creates {
		if len(cr.Instances) > 100 {
			t.Errorf("batch %s has %d instances", cr.BatchID, len(cr.Instances))
		}
		if cr.ClientToken == "" || len(cr.ClientToken) > 64 || cr.ClientToken != domain.NewClientToken(cr.BatchID) {
			t.Errorf("token %q of batch %q", cr.ClientToken, cr.BatchID)
		}
		perGroup[cr.Group] += len(cr.Instances)
	}
	// g: its own limit 250; h: what the account has left (300 - 250).
	if perGroup["g"] != 250 || perGroup["h"] != 50 {
		t.Errorf("dispatched %v, want g=250 h=50", perGroup)
	}
	// Every Creating record carries its batch and token before the command.
	for _, in := range h.instances("") {
		if in.State == domain.StateCreating && (in.BatchID == "" || in.ClientToken == "" || in.Attempt != 1) {
			t.Errorf("%s Creating without batch/token/attempt: %+v", in.ID, in)
		}
	}
	h.settle()
	if n := h.byState("g")[domain.StateRunning] + h.byState("h")[domain.StateRunning]; n != 360 {
		t.Errorf("running %d, want 360", n)
	}
}

func TestDeleteParallelism(t *testing.T) {
	g := group("g", 0, 20, 6)
	g.Parallelism.Delete = 2
	h := newHarness(t, []domain.NodeGroup{g})
	h.settle()
	var refs []app.NodeRef
	for _, in := range h.instances("g") {
		refs = append(refs, app.NodeRef{ProviderID: in.ProviderID})
	}
	h.ok(h.app.DeleteNodes(h.ctx, "g", refs))
	h.app.Pass(h.ctx)
	active := 0
	for _, in := range h.instances("g") {
		if in.DeletionActive() {
			active++
		}
	}
	if active != 2 || h.byState("g")[domain.StatePendingDeletion] != 6 {
		t.Errorf("active deletions %d (states %v), want 2 of 6", active, h.byState("g"))
	}
	h.settle()
	if h.byState("g")[domain.StateDeleted] != 6 {
		t.Errorf("states %v", h.byState("g"))
	}
}

// A crash between writing the target and creating the records leaves the
// group below target: the dispatcher creates the missing records.
func TestDispatcherRestoresTheTargetCount(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 10, 0)})
	v, _ := h.store.GetGroup(h.ctx, "g")
	v.Group.TargetSize = 3
	if _, err := h.store.UpdateGroup(h.ctx, v.Group, v.Revision); err != nil {
		t.Fatal(err)
	}
	h.restart(nil)
	h.settle()
	if h.byState("g")[domain.StateRunning] != 3 {
		t.Errorf("states %v, want 3 Running", h.byState("g"))
	}
	// Above target (a crash in the middle of a decrease): surplus Pending
	// records are cancelled.
	h.ok(h.app.IncreaseSize(h.ctx, "g", 2))
	v, _ = h.store.GetGroup(h.ctx, "g")
	v.Group.TargetSize = 3
	if _, err := h.store.UpdateGroup(h.ctx, v.Group, v.Revision); err != nil {
		t.Fatal(err)
	}
	h.restart(nil)
	h.app.Pass(h.ctx)
	if st := h.byState("g"); st[domain.StatePending] != 0 || st[domain.StateDeleted] != 2 {
		t.Errorf("states %v, want the 2 surplus Pending cancelled", st)
	}
}

// A command that cannot be published is retried; the record stays in flight.
func TestPublishFailureIsRetried(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 10, 0)})
	h.ok(h.app.IncreaseSize(h.ctx, "g", 2))
	h.cmds.FailNext(errors.New("nats: timeout"))
	h.app.Pass(h.ctx)
	if n := len(h.cmds.Snapshot().Creates); n != 0 {
		t.Fatalf("creates published %d", n)
	}
	if h.byState("g")[domain.StateCreating] != 2 {
		t.Fatalf("states %v", h.byState("g"))
	}
	h.app.Pass(h.ctx)
	if n := len(h.cmds.Snapshot().Creates); n != 1 {
		t.Fatalf("creates after retry %d, want 1", n)
	}
	// Published once per attempt: further passes publish nothing new.
	h.app.Pass(h.ctx)
	if n := len(h.cmds.Snapshot().Creates); n != 1 {
		t.Errorf("creates %d, want still 1", n)
	}
}

// After a restart every in-flight command is published again with the same
// batch, token and attempt (the stream deduplicates the message id).
func TestRestartRepublishesInFlightCommands(t *testing.T) {
	g := group("g", 0, 10, 0)
	h := newHarness(t, []domain.NodeGroup{g})
	h.ok(h.app.IncreaseSize(h.ctx, "g", 3))
	h.app.Pass(h.ctx)
	first := h.cmds.Snapshot().Creates
	if len(first) != 1 {
		t.Fatalf("creates %d", len(first))
	}
	h.restart(nil)
	h.app.Pass(h.ctx)
	again := h.cmds.Snapshot().Creates
	if len(again) != 2 {
		t.Fatalf("creates after restart %d, want 2", len(again))
	}
	a, b := first[0], again[1]
	if a.BatchID != b.BatchID || a.ClientToken != b.ClientToken || a.Attempt != b.Attempt || len(a.Instances) != len(b.Instances) {
		t.Errorf("re-published create differs:\n%+v\n%+v", a, b)
	}
	h.settle()
	if h.byState("g")[domain.StateRunning] != 3 {
		t.Errorf("states %v", h.byState("g"))
	}
}

func TestClusterModeJoinsLabelsAndDeletesNodes(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 10, 0)}, withCluster())
	h.ok(h.app.IncreaseSize(h.ctx, "g", 1))
	h.settle()
	in := h.instances("g")[0]
	if in.State != domain.StateJoined {
		t.Fatalf("state %s, want Joined (no node yet)", in.State)
	}
	// A NotReady node, then a Ready one with another providerID: not ours.
	h.cluster.Put(ports.Node{Name: in.ID, ProviderID: in.ProviderID})
	eventually(t, func() bool { _, ok := h.app.Node(in.ID); return ok })
	h.app.Pass(h.ctx)
	if h.instances("g")[0].State != domain.StateJoined {
		t.Fatalf("a NotReady node made the instance Running")
	}
	h.cluster.Put(ports.Node{Name: in.ID, ProviderID: in.ProviderID, Ready: true})
	eventually(t, func() bool { n, _ := h.app.Node(in.ID); return n.Ready })
	h.app.Pass(h.ctx)
	if got := h.instances("g")[0].State; got != domain.StateRunning {
		t.Fatalf("state %s, want Running", got)
	}
	n, _ := h.cluster.Get(in.ID)
	if n.Labels["role"] != "g" || n.Labels[app.LabelGroup] != "g" || len(n.Taints) != 1 {
		t.Errorf("node not labelled: %+v", n)
	}
	// Deletion removes the Node object after the VM is gone.
	h.ok(h.app.DeleteNodes(h.ctx, "g", []app.NodeRef{{ProviderID: in.ProviderID, Name: in.ID}}))
	h.settle()
	if got := h.instances("g")[0].State; got != domain.StateDeleted {
		t.Fatalf("state %s", got)
	}
	if !slices.Contains(h.cluster.Deleted(), in.ID) {
		t.Errorf("node not deleted: %v", h.cluster.Deleted())
	}
}

// A Node delete that fails keeps the record in Deleting; the terminated
// event is redelivered and succeeds once the API is back.
func TestNodeDeleteFailureIsRetried(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 10, 1)}, withCluster())
	h.settle()
	in := h.instances("g")[0]
	h.ok(h.app.DeleteNodes(h.ctx, "g", []app.NodeRef{{ProviderID: in.ProviderID}}))
	h.app.Pass(h.ctx)
	h.answer() // before_delete hook
	h.app.Pass(h.ctx)
	term := h.cmds.Snapshot().Terminates
	ref := term[len(term)-1].Instances[0]
	h.cluster.SetErrors(nil, errors.New("apiserver unavailable"))
	if err := h.app.HandleEvent(h.ctx, ref.InstanceID, domain.CloudTerminated{Attempt: ref.Attempt}); err == nil {
		t.Fatal("a failed node delete must fail the event (redelivery)")
	}
	if got := h.instances("g")[0].State; got != domain.StateDeleting {
		t.Fatalf("state %s, want still Deleting", got)
	}
	h.cluster.SetErrors(nil, nil)
	h.event(ref.InstanceID, domain.CloudTerminated{Attempt: ref.Attempt})
	if got := h.instances("g")[0].State; got != domain.StateDeleted {
		t.Errorf("state %s", got)
	}
}

func TestDeadlinesDriveRecovery(t *testing.T) {
	p := domain.DefaultPolicy()
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 10, 0)}, withCluster())
	h.ok(h.app.IncreaseSize(h.ctx, "g", 1))
	h.settle()
	in := h.instances("g")[0]
	if in.State != domain.StateJoined {
		t.Fatalf("state %s", in.State)
	}
	// The node never joins: after the join deadline the creation failed
	// and CA sees the error; CA then deletes it.
	h.clock.Advance(p.JoinTimeout)
	h.app.Pass(h.ctx)
	in = h.instances("g")[0]
	if !in.CreationFailed || in.LastError.Code != "JoinTimeout" {
		t.Fatalf("after join deadline: %+v", in.LastError)
	}
	h.ok(h.app.DeleteNodes(h.ctx, "g", []app.NodeRef{{ProviderID: in.ProviderID}}))
	h.settle()
	if got := h.instances("g")[0].State; got != domain.StateDeleted {
		t.Errorf("state %s, want Deleted", got)
	}
}

// TestPurgeDrainsABacklogPassAfterPass: one batch per interval caps the
// purge at PurgeBatch records per PurgeInterval (14,400 a day by
// default); a provider churning faster kept Deleted records without
// bound. A purge that leaves records past the retention purges again at
// the next pass, a batch each, until none is left.
func TestPurgeDrainsABacklogPassAfterPass(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 100, 0)}, withOptions(func(o *app.Options) {
		o.DeletedRetention = time.Hour
		o.PurgeInterval = time.Minute
		o.PurgeBatch = 2
	}))
	h.ok(h.app.IncreaseSize(h.ctx, "g", 9))
	h.ok(h.app.DecreaseTargetSize(h.ctx, "g", -9)) // nine Pending cancelled: Deleted
	h.app.Pass(h.ctx)
	h.clock.Advance(2 * time.Hour)
	// Passes at the same instant (well within one interval): each purges
	// one batch while records past the retention remain.
	for i, want := range []int{7, 5, 3, 1, 0, 0} {
		h.app.Pass(h.ctx)
		if n := len(h.instances("g")); n != want {
			t.Fatalf("records after pass %d: %d, want %d (a batch of 2 per pass while a backlog remains)", i+1, n, want)
		}
	}
	if is, _ := h.store.ListInstances(h.ctx); len(is) != 0 {
		t.Errorf("stored records %d, want 0", len(is))
	}
}

func TestPurgeOfOldDeletedRecords(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 10, 0)}, withOptions(func(o *app.Options) {
		o.DeletedRetention = time.Hour
		o.PurgeInterval = time.Minute
		o.PurgeBatch = 2
	}))
	h.ok(h.app.IncreaseSize(h.ctx, "g", 3))
	h.ok(h.app.DecreaseTargetSize(h.ctx, "g", -3)) // three Pending cancelled: Deleted
	h.app.Pass(h.ctx)
	if len(h.instances("g")) != 3 {
		t.Fatalf("records %d", len(h.instances("g")))
	}
	h.clock.Advance(2 * time.Hour)
	h.app.Pass(h.ctx)
	if n := len(h.instances("g")); n != 1 {
		t.Errorf("records after one purge %d, want 1 (batch of 2)", n)
	}
	h.clock.Advance(2 * time.Minute)
	h.app.Pass(h.ctx)
	if n := len(h.instances("g")); n != 0 {
		t.Errorf("records %d, want 0", n)
	}
	if is, _ := h.store.ListInstances(h.ctx); len(is) != 0 {
		t.Errorf("stored records %d", len(is))
	}
}
