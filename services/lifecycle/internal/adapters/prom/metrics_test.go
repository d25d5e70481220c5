package prom_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/metrics/metricstest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/memory"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/prom"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

type world struct {
	t     *testing.T
	reg   *prometheus.Registry
	app   *app.App
	cmds  *memory.Commands
	clock *memory.Clock
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, reg: prometheus.NewRegistry(), cmds: &memory.Commands{}, clock: memory.NewClock(time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC))}
	opts := app.DefaultOptions()
	opts.OrphanGrace = time.Minute
	w.app = app.New(opts, app.Deps{
		Store: memory.NewStore(), Commands: w.cmds, Clock: w.clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Observer: prom.New(w.reg),
	})
	w.reg.MustRegister(prom.NewCollector(w.app.Stats), prom.NewOrphanCollector(w.app.HeldOrphans))
	g := domain.NodeGroup{ID: "g", MinSize: 1, MaxSize: 5,
		Template: domain.InstanceTemplate{Name: "small", Provider: "tencentcloud", Account: "dev", Region: "r"}}
	ctx := context.Background()
	if err := w.app.SetConfig(ctx, []domain.NodeGroup{g}); err != nil {
		t.Fatal(err)
	}
	if err := w.app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *world) v(name string, labels map[string]string) float64 {
	return metricstest.Value(w.t, w.reg, name, labels)
}

func TestGroupGaugesTransitionsAndDeadlinesFollowTheInstances(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	g := map[string]string{"group": "g"}
	// The prototype's gauges before any work.
	for name, want := range map[string]float64{
		"nodesmith_lifecycle_group_min_size": 1, "nodesmith_lifecycle_group_max_size": 5,
		"nodesmith_lifecycle_group_target_size": 1, "nodesmith_lifecycle_group_nodes": 0,
		"nodesmith_lifecycle_creation_failed_instances": 0,
	} {
		// The min size raised the target; the dispatcher creates the record.
		if got := w.v(name, g); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	created := w.v("nodesmith_lifecycle_transitions_total", map[string]string{"from": "Unknown", "to": "Pending", "reason": "created"})

	if _, err := w.app.IncreaseSize(ctx, "g", 2); err != nil {
		t.Fatal(err)
	}
	if got := w.v("nodesmith_lifecycle_group_target_size", g); got != 3 {
		t.Errorf("target = %v, want 3", got)
	}
	if got := w.v("nodesmith_lifecycle_group_nodes", g); got != 3 {
		t.Errorf("nodes = %v, want 3", got)
	}
	if got := w.v("nodesmith_lifecycle_instances", map[string]string{"group": "g", "state": "Pending"}); got != 3 {
		t.Errorf("Pending instances = %v, want 3", got)
	}
	if got := w.v("nodesmith_lifecycle_transitions_total", map[string]string{"from": "Unknown", "to": "Pending", "reason": "created"}); got != created+3 {
		t.Errorf("created transitions = %v, want %v", got, created+3)
	}

	w.clock.Advance(time.Minute)
	w.app.Pass(ctx) // StartCreate: Pending -> Creating with the launch deadline
	if got := w.v("nodesmith_lifecycle_state_duration_seconds", map[string]string{"state": "Pending"}); got != 3 {
		t.Errorf("time-in-Pending observations = %v, want 3", got)
	}
	creating := map[string]string{"group": "g", "state": "Creating"}
	if got := w.v("nodesmith_lifecycle_instances", creating); got != 3 {
		t.Errorf("Creating instances = %v, want 3", got)
	}
	if got := w.v("nodesmith_lifecycle_transitions_total", map[string]string{"from": "Pending", "to": "Creating", "reason": "start_create"}); got != 3 {
		t.Errorf("start_create transitions = %v, want 3", got)
	}
	if got := w.v("nodesmith_lifecycle_instances_past_deadline", creating); got != 0 {
		t.Errorf("past deadline right after the create = %v, want 0", got)
	}
	w.clock.Advance(24 * time.Hour)
	if got := w.v("nodesmith_lifecycle_instances_past_deadline", creating); got != 3 {
		t.Errorf("past deadline once the launch timeout passed = %v, want 3", got)
	}
	w.app.Pass(ctx) // the deadline fires
	if got := w.v("nodesmith_lifecycle_instances_past_deadline", creating); got != 0 {
		t.Errorf("past deadline after the dispatcher acted = %v, want 0", got)
	}
}

func TestReconcilerCountsOrphansFoundAndTerminated(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	// The orphans are created after lifecycle started (from empty state,
	// which holds back only older ones).
	w.clock.Advance(2 * time.Hour)
	w.app.RequestInventory(ctx)
	reqs := w.cmds.Snapshot().Inventory
	if len(reqs) != 1 {
		t.Fatalf("inventory requests = %d, want 1", len(reqs))
	}
	old := w.clock.Now().Add(-time.Hour)
	inv := app.Inventory{RequestID: reqs[0].RequestID, Target: reqs[0].Target, Items: []app.InventoryItem{
		{CloudID: "ins-orphan1", InstanceID: "g-gone1", Group: "g", State: domain.CloudRunning, CreatedAt: old},
		{CloudID: "ins-orphan2", InstanceID: "g-gone2", Group: "g", State: domain.CloudRunning, CreatedAt: old},
		// Too young to be called an orphan (grace).
		{CloudID: "ins-young", InstanceID: "g-young", Group: "g", State: domain.CloudRunning, CreatedAt: w.clock.Now()},
	}}
	w.cmds.FailNext(context.DeadlineExceeded) // the terminate publication fails: found, not terminated
	if err := w.app.HandleInventory(ctx, inv); err != nil {
		t.Fatal(err)
	}
	if got := w.v("nodesmith_lifecycle_orphans_found_total", nil); got != 2 {
		t.Errorf("orphans found = %v, want 2", got)
	}
	if got := w.v("nodesmith_lifecycle_orphans_terminated_total", nil); got != 0 {
		t.Errorf("orphans terminated after a failed publication = %v, want 0", got)
	}

	w.app.RequestInventory(ctx)
	reqs = w.cmds.Snapshot().Inventory
	inv.RequestID = reqs[len(reqs)-1].RequestID
	if err := w.app.HandleInventory(ctx, inv); err != nil {
		t.Fatal(err)
	}
	if got := w.v("nodesmith_lifecycle_orphans_found_total", nil); got != 4 {
		t.Errorf("orphans found = %v, want 4", got)
	}
	if got := w.v("nodesmith_lifecycle_orphans_terminated_total", nil); got != 2 {
		t.Errorf("orphans terminated = %v, want 2", got)
	}
}

func TestHeldOrphansGauge(t *testing.T) {
	w := newWorld(t) // an empty store: the start-up hold is on
	ctx := context.Background()
	for _, r := range app.HeldReasons {
		if got := w.v("nodesmith_lifecycle_orphans_held_back", map[string]string{"reason": r}); got != 0 {
			t.Errorf("held back (%s) before any inventory = %v", r, got)
		}
	}
	start := w.clock.Now()
	w.clock.Advance(time.Hour)
	w.app.RequestInventory(ctx)
	reqs := w.cmds.Snapshot().Inventory
	inv := app.Inventory{RequestID: reqs[0].RequestID, Target: reqs[0].Target, Items: []app.InventoryItem{
		{CloudID: "ins-before1", Group: "g", State: domain.CloudRunning, CreatedAt: start.Add(-time.Hour)},
		{CloudID: "ins-before2", Group: "g", State: domain.CloudRunning, CreatedAt: start.Add(-time.Minute)},
	}}
	if err := w.app.HandleInventory(ctx, inv); err != nil {
		t.Fatal(err)
	}
	if got := w.v("nodesmith_lifecycle_orphans_held_back", map[string]string{"reason": app.HeldEmptyStart}); got != 2 {
		t.Errorf("held back by the start-up hold = %v, want 2", got)
	}
	if got := w.v("nodesmith_lifecycle_orphans_terminated_total", nil); got != 0 {
		t.Errorf("orphans terminated = %v, want 0", got)
	}
}

func TestLeaderGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := prom.NewServiceMetrics(reg)
	for _, lead := range []bool{true, false, true} {
		m.SetLeading(lead)
		want := 0.0
		if lead {
			want = 1
		}
		if got := metricstest.Value(t, reg, "nodesmith_lifecycle_leader", nil); got != want {
			t.Errorf("leader after SetLeading(%v) = %v", lead, got)
		}
	}
}
