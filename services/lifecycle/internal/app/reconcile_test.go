package app_test

import (
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/libs/providerid"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

func TestReconcilerTerminatesOrphansAndClosesVanishedRecords(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 10, 0)}, withOptions(func(o *app.Options) {
		o.ReconcileInterval = time.Minute
		o.OrphanGrace = 2 * time.Minute
	}))
	h.ok(h.app.IncreaseSize(h.ctx, "g", 4))
	h.settle()
	is := h.instances("g")
	h.clock.Advance(10 * time.Minute)

	inventory := func() app.Inventory {
		h.app.RequestInventory(h.ctx)
		reqs := h.cmds.Snapshot().Inventory
		req := reqs[len(reqs)-1]
		if req.ClusterID != "nodesmith" || req.Target.Account != "dev" {
			t.Fatalf("inventory request %+v", req)
		}
		return app.Inventory{RequestID: req.RequestID, Target: req.Target}
	}

	inv := inventory()
	// is[0]'s VM vanished; is[1..3] are listed; two orphans: one old (but
	// created after lifecycle started: the start-up hold does not apply),
	// one young (within grace); one old VM of a Deleted-long-ago instance.
	// VMs of a multi-instance batch carry only the batch tag: they are
	// matched by cloud id.
	for _, in := range is[1:] {
		inv.Items = append(inv.Items, app.InventoryItem{CloudID: in.CloudID, BatchID: in.BatchID, Group: "g", State: domain.CloudRunning, CreatedAt: t0})
	}
	now := h.clock.Now()
	inv.Items = append(inv.Items,
		app.InventoryItem{CloudID: "ins-orphan-old", InstanceID: "g-zzzzzzzzzz", Group: "g", State: domain.CloudRunning, CreatedAt: now.Add(-5 * time.Minute)},
		app.InventoryItem{CloudID: "ins-orphan-young", InstanceID: "g-yyyyyyyyyy", Group: "g", State: domain.CloudRunning, CreatedAt: now.Add(-time.Minute)},
		app.InventoryItem{CloudID: "ins-going", InstanceID: "g-xxxxxxxxxx", Group: "g", State: domain.CloudTerminating, CreatedAt: t0},
	)
	before := len(h.cmds.Snapshot().Terminates)
	if err := h.app.HandleInventory(h.ctx, inv); err != nil {
		t.Fatal(err)
	}
	terms := h.cmds.Snapshot().Terminates[before:]
	if len(terms) != 1 || len(terms[0].Instances) != 1 || terms[0].Instances[0].CloudID != "ins-orphan-old" || terms[0].ClusterID != "nodesmith" {
		t.Fatalf("orphan terminations %+v, want only ins-orphan-old, of cluster nodesmith", terms)
	}
	var vanished domain.Instance
	for _, in := range h.instances("g") {
		if in.ID == is[0].ID {
			vanished = in
		}
	}
	if vanished.State != domain.StateDeleted || vanished.Released {
		t.Fatalf("vanished record: %s released %v", vanished.State, vanished.Released)
	}
	// Still counted in the target, so it is replaced.
	h.settle()
	if st := h.byState("g"); st[domain.StateRunning] != 4 || h.target("g") != 4 {
		t.Errorf("states %v target %d, want 4 Running", st, h.target("g"))
	}

	t.Run("a VM whose create result is outstanding is not an orphan", func(t *testing.T) {
		h.ok(h.app.IncreaseSize(h.ctx, "g", 1))
		h.app.Pass(h.ctx) // create published, no answer yet
		var waiting domain.Instance
		for _, in := range h.instances("g") {
			if in.State == domain.StateCreating {
				waiting = in
			}
		}
		if waiting.BatchID == "" {
			t.Fatal("no instance waiting for its create")
		}
		h.clock.Advance(time.Hour)
		inv := inventory()
		for _, in := range h.instances("g") {
			if in.CloudID != "" && in.Live() {
				inv.Items = append(inv.Items, app.InventoryItem{CloudID: in.CloudID, BatchID: in.BatchID, State: domain.CloudRunning, CreatedAt: t0})
			}
		}
		inv.Items = append(inv.Items, app.InventoryItem{CloudID: "ins-new", BatchID: waiting.BatchID, State: domain.CloudPending, CreatedAt: t0})
		before := len(h.cmds.Snapshot().Terminates)
		if err := h.app.HandleInventory(h.ctx, inv); err != nil {
			t.Fatal(err)
		}
		if n := len(h.cmds.Snapshot().Terminates) - before; n != 0 {
			t.Errorf("%d terminations: the VM of a pending create was taken for an orphan", n)
		}
		h.settle()
		h.ok(h.app.DeleteNodes(h.ctx, "g", []app.NodeRef{{ProviderID: providerid.Placeholder("g", waiting.ID)}}))
		h.settle()
	})
	t.Run("answers to unknown requests are dropped", func(t *testing.T) {
		before := len(h.cmds.Snapshot().Terminates)
		if err := h.app.HandleInventory(h.ctx, app.Inventory{RequestID: "inv-other", Target: ports.Target{Provider: "tencentcloud", Account: "dev", Region: "ap-guangzhou"},
			Items: []app.InventoryItem{{CloudID: "ins-x", InstanceID: "nope", CreatedAt: t0}}}); err != nil {
			t.Fatal(err)
		}
		if len(h.cmds.Snapshot().Terminates) != before {
			t.Error("acted on an inventory it did not ask for")
		}
	})
	t.Run("an inventory missing most VMs is not trusted", func(t *testing.T) {
		h.clock.Advance(10 * time.Minute)
		inv := inventory() // empty: every VM "vanished"
		if err := h.app.HandleInventory(h.ctx, inv); err != nil {
			t.Fatal(err)
		}
		if st := h.byState("g"); st[domain.StateRunning] != 4 {
			t.Errorf("states %v: an implausible inventory closed records", st)
		}
	})
	t.Run("a failed listing concludes nothing", func(t *testing.T) {
		inv := inventory()
		inv.Err = &domain.CloudError{Kind: contract.ErrorKindThrottled, Code: "RequestLimitExceeded"}
		if err := h.app.HandleInventory(h.ctx, inv); err != nil {
			t.Fatal(err)
		}
		if st := h.byState("g"); st[domain.StateRunning] != 4 {
			t.Errorf("states %v", st)
		}
	})
}
