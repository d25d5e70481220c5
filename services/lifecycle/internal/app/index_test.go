package app_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// The dispatcher's index (live counts, instances with work, batch members)
// is kept on every change; it must always equal one rebuilt from the
// records, through scale-up, deletions, cancellations, failures and a
// restart.
func TestIndexFollowsEveryChange(t *testing.T) {
	g := group("g", 0, 100, 0)
	g.Parallelism.Create = 7
	h := newHarness(t, []domain.NodeGroup{g, group("h", 0, 100, 0)}, withCluster())
	check := func(step string) {
		t.Helper()
		if err := h.app.CheckIndex(); err != nil {
			t.Fatalf("after %s: %v", step, err)
		}
	}
	h.ok(h.app.IncreaseSize(h.ctx, "g", 20))
	h.ok(h.app.IncreaseSize(h.ctx, "h", 5))
	check("IncreaseSize")
	h.app.Pass(h.ctx)
	check("first pass")
	// A failed creation: the instance is back to Pending with a retry.
	c := h.cmds.Snapshot()
	first := c.Creates[0]
	h.event(first.Instances[0].InstanceID, domain.CloudCreateFailed{Attempt: first.Instances[0].Attempt, BatchID: first.BatchID,
		Err: domain.CloudError{Kind: contract.ErrorKindTransient, Code: "InternalError", Message: "boom"}})
	check("a failed create")
	for range 20 {
		h.clock.Advance(30 * time.Second)
		h.settle()
		check("settle")
		// Register the Nodes of the joined instances.
		for _, in := range h.instances("") {
			if in.State == domain.StateJoined {
				h.cluster.Put(ports.Node{Name: in.ID, ProviderID: in.ProviderID, Ready: true})
				eventually(t, func() bool { n, _ := h.app.Node(in.ID); return n.Ready })
			}
		}
	}
	h.settle()
	if n := h.byState("g")[domain.StateRunning]; n != 20 {
		t.Fatalf("g running %d, want 20: %v", n, h.byState("g"))
	}
	// A Running instance at rest whose Node is deleted by someone else is
	// noticed at the next pass (the node check is not limited to
	// instances with work).
	lost := h.instances("h")[0]
	if err := h.cluster.DeleteNode(h.ctx, lost.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { _, ok := h.app.Node(lost.ID); return !ok })
	h.app.Pass(h.ctx)
	if got := h.instances("h")[0]; !got.NodeLost() {
		t.Fatalf("instance whose node was deleted: %+v, want NodeLost", got)
	}
	check("node lost")
	h.cluster.Put(ports.Node{Name: lost.ID, ProviderID: lost.ProviderID, Ready: true})
	eventually(t, func() bool { _, ok := h.app.Node(lost.ID); return ok })
	h.app.Pass(h.ctx)
	if got := h.instances("h")[0]; got.NodeLost() || got.State != domain.StateRunning {
		t.Fatalf("instance whose node came back: %+v, want Running", got)
	}
	var nodes []app.NodeRef
	for _, in := range h.instances("g")[:4] {
		nodes = append(nodes, app.NodeRef{ProviderID: in.ProviderID, Name: in.Node()})
	}
	h.ok(h.app.DeleteNodes(h.ctx, "g", nodes))
	check("DeleteNodes")
	h.settle()
	check("deletions settled")
	h.ok(h.app.IncreaseSize(h.ctx, "h", 10))
	h.ok(h.app.DecreaseTargetSize(h.ctx, "h", -6))
	check("cancellations")
	h.restart(nil)
	check("restart")
	h.settle()
	check("after restart")
	if got := h.byState("g")[domain.StateRunning]; got != 16 {
		t.Fatalf("g running %d, want 16", got)
	}
}

// While a group's creations finish one by one, the dispatcher waits up to
// CreateLinger for a fuller batch instead of sending a create call per
// freed slot; it never waits when nothing of the group is in flight.
func TestCreateBatchesCoalesce(t *testing.T) {
	g := group("g", 0, 100, 0)
	g.Parallelism.Create = 10
	h := newHarness(t, []domain.NodeGroup{g})
	h.ok(h.app.IncreaseSize(h.ctx, "g", 25))
	h.app.Pass(h.ctx)
	creates := func() []int {
		var sizes []int
		for _, c := range h.cmds.Snapshot().Creates {
			sizes = append(sizes, len(c.Instances))
		}
		return sizes
	}
	if got := creates(); len(got) != 1 || got[0] != 10 {
		t.Fatalf("first batches %v, want [10]", got)
	}
	created := func() {
		for _, c := range h.cmds.Snapshot().Creates {
			for i, r := range c.Instances {
				h.event(r.InstanceID, domain.CloudCreated{Attempt: r.Attempt, BatchID: c.BatchID, CloudID: c.BatchID + "-" + string(rune('a'+i))})
			}
		}
	}
	running := func(n int) {
		for _, in := range h.instances("g") {
			if n == 0 {
				return
			}
			if in.State == domain.StateCreating && in.CloudID != "" {
				h.event(in.ID, domain.CloudObserved{Attempt: in.Attempt, State: domain.CloudRunning, PrivateIP: "10.0.0.1"})
				n--
			}
		}
	}
	created()
	running(3)
	h.app.Pass(h.ctx)
	if got := creates(); len(got) != 1 {
		t.Fatalf("3 slots free while 7 creations run: batches %v, want no new batch before the linger", got)
	}
	h.clock.Advance(h.opts.CreateLinger)
	h.app.Pass(h.ctx)
	if got := creates(); len(got) != 2 || got[1] != 3 {
		t.Fatalf("after the linger: batches %v, want [10 3]", got)
	}
	created()
	running(10) // every creation of the group done: no slot will free by waiting
	h.app.Pass(h.ctx)
	if got := creates(); len(got) != 3 || got[2] != 10 {
		t.Fatalf("all slots free: batches %v, want [10 3 10] at once", got)
	}
}

// A create command watches the VMs it created, so no watch command follows
// a create result, however the results arrive; only a new leadership term
// (a restart: no create command of its own watches the VMs) publishes a
// watch, under the same attempt, whose observations settle the instances.
func TestCreateBatchWatchedByItsCreateCommand(t *testing.T) {
	groups := []domain.NodeGroup{group("g", 0, 100, 0)}
	h := newHarness(t, groups)
	h.ok(h.app.IncreaseSize(h.ctx, "g", 3))
	h.app.Pass(h.ctx)
	creates := h.cmds.Snapshot().Creates
	if len(creates) != 1 || len(creates[0].Instances) != 3 {
		t.Fatalf("create batches %+v, want one of 3", creates)
	}
	c := creates[0]
	for i, r := range c.Instances[:2] {
		h.event(r.InstanceID, domain.CloudCreated{Attempt: r.Attempt, BatchID: c.BatchID, CloudID: fmt.Sprintf("%s-%d", c.BatchID, i)})
		h.app.Pass(h.ctx)
	}
	h.clock.Advance(h.opts.CreateLinger)
	h.app.Pass(h.ctx)
	if w := h.cmds.Snapshot().Watches; len(w) != 0 {
		t.Fatalf("watches %+v published for VMs their create command watches", w)
	}
	for _, in := range h.instances("g") {
		if in.State != domain.StateCreating || !in.InFlight {
			t.Fatalf("%s is %s (in flight %v), want Creating in flight", in.ID, in.State, in.InFlight)
		}
	}

	h.restart(groups)
	h.app.Pass(h.ctx)
	w := h.cmds.Snapshot().Watches
	if len(w) != 1 || len(w[0].Instances) != 2 {
		t.Fatalf("watches after a restart %+v, want one of the 2 created VMs", w)
	}
	for _, r := range w[0].Instances {
		h.event(r.InstanceID, domain.CloudObserved{Attempt: r.Attempt, State: domain.CloudRunning, PrivateIP: "10.0.0.1"})
	}
	if got := h.byState("g")[domain.StateCreated]; got != 2 {
		t.Fatalf("states %v, want the 2 watched instances Created", h.byState("g"))
	}
}

// The cloud adapter's events are handled concurrently, so a create
// command's first observation can be applied before its create result: the
// cloud id the observation carries (the adapter's event decoding makes it a
// CloudCreated of the same attempt) is recorded first and the observation
// is not lost; the create result then is a duplicate.
func TestObservationBeforeItsCreateResult(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 100, 0)})
	h.ok(h.app.IncreaseSize(h.ctx, "g", 1))
	h.app.Pass(h.ctx)
	c := h.cmds.Snapshot().Creates[0]
	r := c.Instances[0]
	h.event(r.InstanceID, domain.CloudCreated{Attempt: r.Attempt, CloudID: "ins-1"})
	h.event(r.InstanceID, domain.CloudObserved{Attempt: r.Attempt, State: domain.CloudRunning, PrivateIP: "10.0.0.1"})
	h.event(r.InstanceID, domain.CloudCreated{Attempt: r.Attempt, BatchID: c.BatchID, CloudID: "ins-1"})
	in := h.instance(r.InstanceID)
	if in.State != domain.StateCreated || in.CloudID != "ins-1" {
		t.Fatalf("%s is %s with VM %q, want Created with ins-1", in.ID, in.State, in.CloudID)
	}
}
