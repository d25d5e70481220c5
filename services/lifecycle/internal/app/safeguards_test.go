package app_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/memory"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// The orphan reconciler's safeguards (reconcile.go): destruction must not
// run away when the records, not the cloud, are wrong.

// fleet is a harness whose group has n Running instances, created after
// lifecycle started (so the start-up hold covers none of them).
func fleet(t *testing.T, n int, opts ...harnessOpt) *harness {
	t.Helper()
	opts = append([]harnessOpt{withOptions(func(o *app.Options) {
		o.ReconcileInterval = time.Minute
		o.OrphanGrace = 2 * time.Minute
	})}, opts...)
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 100, 0)}, opts...)
	h.clock.Advance(time.Minute)
	if n > 0 {
		h.ok(h.app.IncreaseSize(h.ctx, "g", n))
		h.settle()
	}
	h.clock.Advance(time.Hour)
	return h
}

// orphan is a tagged VM no record owns, created at created.
func orphan(i int, created time.Time) app.InventoryItem {
	return app.InventoryItem{CloudID: fmt.Sprintf("ins-orphan-%02d", i), InstanceID: fmt.Sprintf("g-orphan%05d", i),
		Group: "g", State: domain.CloudRunning, CreatedAt: created}
}

// reconcile runs one reconciler comparison: the cloud lists the VMs of
// the live records and extra, and returns the cloud ids it terminated.
func (h *harness) reconcile(extra ...app.InventoryItem) []string {
	h.t.Helper()
	h.app.RequestInventory(h.ctx)
	reqs := h.cmds.Snapshot().Inventory
	req := reqs[len(reqs)-1]
	inv := app.Inventory{RequestID: req.RequestID, Target: req.Target}
	for _, in := range h.instances("g") {
		if in.CloudID != "" && in.Live() {
			inv.Items = append(inv.Items, app.InventoryItem{CloudID: in.CloudID, BatchID: in.BatchID, Group: "g", State: domain.CloudRunning, CreatedAt: in.CreatedAt})
		}
	}
	inv.Items = append(inv.Items, extra...)
	before := len(h.cmds.Snapshot().Terminates)
	if err := h.app.HandleInventory(h.ctx, inv); err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, c := range h.cmds.Snapshot().Terminates[before:] {
		if c.ClusterID != "nodesmith" {
			h.t.Errorf("orphan terminate names cluster %q", c.ClusterID)
		}
		for _, r := range c.Instances {
			out = append(out, r.CloudID)
		}
	}
	return out
}

func (h *harness) held() app.OrphanStatus {
	h.t.Helper()
	s, ok := h.app.HeldOrphans()
	if !ok {
		h.t.Fatal("not leading")
	}
	return s
}

// terminating marks items as the cloud lists them once terminated.
func terminating(items []app.InventoryItem, ids []string) []app.InventoryItem {
	out := slices.Clone(items)
	for i := range out {
		if slices.Contains(ids, out[i].CloudID) {
			out[i].State = domain.CloudTerminating
		}
	}
	return out
}

func TestOrphanTerminationsAreCappedPerPass(t *testing.T) {
	h := fleet(t, 30)
	now := h.clock.Now()
	var orphans []app.InventoryItem
	for i := range 12 {
		// Listed newest first: the cap takes the oldest first anyway.
		orphans = append(orphans, orphan(i, now.Add(-time.Duration(20-i)*time.Minute)))
	}
	slices.Reverse(orphans)

	got := h.reconcile(orphans...)
	var want []string
	for i := range 10 {
		want = append(want, fmt.Sprintf("ins-orphan-%02d", i))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("first pass terminated %v, want the 10 oldest %v", got, want)
	}
	if s := h.held(); s.Held[app.HeldCap] != 2 || len(s.Held) != 1 || len(s.Waiting) != 0 {
		t.Errorf("held %+v, want 2 over the cap", s)
	}
	got = h.reconcile(terminating(orphans, got)...)
	if !slices.Equal(got, []string{"ins-orphan-10", "ins-orphan-11"}) {
		t.Errorf("second pass terminated %v, want the 2 held back", got)
	}
	if s := h.held(); len(s.Held) != 0 {
		t.Errorf("held %+v after the rest was terminated", s)
	}

	t.Run("a cap of 0 terminates none", func(t *testing.T) {
		h := fleet(t, 10, withOptions(func(o *app.Options) { o.MaxOrphanTerminations = 0 }))
		if got := h.reconcile(orphan(1, h.clock.Now().Add(-10*time.Minute))); len(got) != 0 {
			t.Errorf("terminated %v", got)
		}
		if s := h.held(); s.Held[app.HeldCap] != 1 {
			t.Errorf("held %+v", s)
		}
	})
}

func TestImplausiblyManyOrphansAreHeldBack(t *testing.T) {
	for _, tc := range []struct {
		name            string
		records, extras int
		wantTerminated  int
	}{
		// More orphans than listed VMs with a record, more than a handful:
		// state loss or another cluster with our cluster id.
		{name: "most of the fleet", records: 4, extras: 5, wantTerminated: 0},
		// A small fleet can lose half of it to one crash.
		{name: "a handful", records: 1, extras: 3, wantTerminated: 3},
		{name: "half of the fleet", records: 5, extras: 5, wantTerminated: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := fleet(t, tc.records)
			var orphans []app.InventoryItem
			for i := range tc.extras {
				orphans = append(orphans, orphan(i, h.clock.Now().Add(-10*time.Minute)))
			}
			got := h.reconcile(orphans...)
			if len(got) != tc.wantTerminated {
				t.Fatalf("terminated %v, want %d", got, tc.wantTerminated)
			}
			s := h.held()
			if tc.wantTerminated > 0 {
				if len(s.Held) != 0 {
					t.Errorf("held %+v", s)
				}
				return
			}
			if s.Held[app.HeldImplausible] != tc.extras || len(s.Waiting) != tc.extras {
				t.Errorf("held %+v, want all %d as implausible, listed", s, tc.extras)
			}
			if st, _ := h.app.Status(); st.Orphans.Held[app.HeldImplausible] != tc.extras {
				t.Errorf("status summary %+v", st.Orphans)
			}

			// An operator confirms they are orphans: terminated from the
			// next pass on (within the cap).
			h.ok(h.app.ReleaseOrphans(h.ctx))
			if got := h.reconcile(orphans...); len(got) != tc.extras {
				t.Errorf("after the release terminated %v, want %d", got, tc.extras)
			}
			// Orphans created after the release are not confirmed.
			released := h.clock.Now()
			h.clock.Advance(10 * time.Minute)
			var later []app.InventoryItem
			for i := range tc.extras {
				later = append(later, orphan(50+i, released.Add(time.Second)))
			}
			if got := h.reconcile(later...); len(got) != 0 {
				t.Errorf("orphans created after the release terminated: %v", got)
			}
		})
	}
}

// State loss: lifecycle starts with no instance record while the cloud
// holds tagged VMs older than the grace. None is terminated; they are
// reported until an operator releases them or the quiet period passes.
// VMs created after the start follow the normal rules.
func TestStartFromEmptyStateHoldsOrphansBack(t *testing.T) {
	setup := func(t *testing.T) (*harness, []app.InventoryItem, app.InventoryItem) {
		h := fleet(t, 10) // records created after the start
		var old []app.InventoryItem
		for i := range 4 {
			old = append(old, orphan(i, t0.Add(-time.Duration(i+1)*time.Hour)))
		}
		return h, old, orphan(9, h.clock.Now().Add(-10*time.Minute))
	}
	h, old, young := setup(t)
	got := h.reconcile(append(slices.Clone(old), young)...)
	if !slices.Equal(got, []string{young.CloudID}) {
		t.Fatalf("terminated %v, want only the orphan created after the start", got)
	}
	s := h.held()
	if s.Held[app.HeldEmptyStart] != 4 || len(s.Held) != 1 || len(s.Waiting) != 4 || s.HoldSince != t0 ||
		!s.HoldUntil.Equal(t0.Add(24*time.Hour)) {
		t.Fatalf("held %+v, want the 4 older VMs under a start-up hold from %s", s, t0)
	}
	if st, _ := h.app.Status(); !slices.Equal(st.Orphans.Waiting, s.Waiting) {
		t.Errorf("status summary %+v", st.Orphans)
	}
	old = append(old, young)
	old[len(old)-1].State = domain.CloudTerminating

	t.Run("the hold outlives a change of leader in the process", func(t *testing.T) {
		h.app.Stop()
		if err := h.app.Start(h.ctx); err != nil {
			t.Fatal(err)
		}
		if got := h.reconcile(old...); len(got) != 0 {
			t.Errorf("terminated %v", got)
		}
	})
	t.Run("until the quiet period passes", func(t *testing.T) {
		h.clock.Advance(t0.Add(24 * time.Hour).Sub(h.clock.Now()))
		if got := h.reconcile(old...); len(got) != 4 {
			t.Errorf("terminated %v after the quiet period, want the 4 held", got)
		}
		if s := h.held(); !s.HoldSince.IsZero() || len(s.Held) != 0 {
			t.Errorf("held %+v", s)
		}
	})
	t.Run("or an operator releases them", func(t *testing.T) {
		h, old, _ := setup(t)
		if got := h.reconcile(old...); len(got) != 0 {
			t.Fatalf("terminated %v", got)
		}
		h.ok(h.app.ReleaseOrphans(h.ctx))
		if got := h.reconcile(old...); len(got) != 4 {
			t.Errorf("terminated %v after the release, want the 4 held", got)
		}
	})
	t.Run("a restart with records keeps the stored hold", func(t *testing.T) {
		h, old, _ := setup(t)
		h.restart(nil)
		if s := h.held(); s.HoldSince != t0 {
			t.Fatalf("hold after a restart: %+v, want the one from %s", s, t0)
		}
		if got := h.reconcile(old...); len(got) != 0 {
			t.Errorf("terminated %v", got)
		}
	})
	t.Run("a start with records and no stored hold holds nothing", func(t *testing.T) {
		h, old, _ := setup(t)
		h.holds = memory.NewStore()
		h.restart(nil)
		if s := h.held(); !s.HoldSince.IsZero() {
			t.Fatalf("a start-up hold although records exist: %+v", s)
		}
		if got := h.reconcile(old...); len(got) != 4 {
			t.Errorf("terminated %v, want the 4 orphans", got)
		}
	})
	t.Run("0 disables the hold", func(t *testing.T) {
		h := fleet(t, 10, withOptions(func(o *app.Options) { o.EmptyStartOrphanHold = 0 }))
		if got := h.reconcile(orphan(1, t0.Add(-time.Hour))); len(got) != 1 {
			t.Errorf("terminated %v", got)
		}
	})
}

// The hold and the release are stored (beside the groups), not kept in
// the leader's memory: a new leader keeps holding, a release outlives a
// restart, and a later loss of the state holds again.
func TestOrphanHoldIsStored(t *testing.T) {
	// A fleet of 10 whose records are then lost, so its VMs look like
	// orphans, and a leader that starts from the empty bucket.
	lose := func(t *testing.T) (*harness, []app.InventoryItem) {
		h := fleet(t, 10)
		h.clock.Advance(time.Hour)
		var vms []app.InventoryItem
		for _, in := range h.instances("g") {
			vms = append(vms, app.InventoryItem{CloudID: in.CloudID, InstanceID: in.ID, Group: "g", State: domain.CloudRunning, CreatedAt: in.CreatedAt})
		}
		h.store.LoseInstances()
		h.restart(nil)
		return h, vms
	}
	t.Run("a change of leader keeps the hold", func(t *testing.T) {
		h, vms := lose(t)
		since := h.clock.Now()
		if got := h.reconcile(vms...); len(got) != 0 {
			t.Fatalf("terminated %v", got)
		}
		// Another replica takes over later: a new App, nothing in memory.
		h.clock.Advance(3 * time.Hour)
		h.restart(nil)
		s := h.held()
		if !s.HoldSince.Equal(since) || !s.HoldUntil.Equal(since.Add(24*time.Hour)) {
			t.Fatalf("hold after the change of leader %+v, want the stored one from %s", s, since)
		}
		if got := h.reconcile(vms...); len(got) != 0 {
			t.Fatalf("the new leader terminated %v", got)
		}
		if s := h.held(); s.Held[app.HeldEmptyStart] != 10 {
			t.Errorf("held %+v, want the 10 VMs", s)
		}
		stored, _, err := h.store.GetOrphanHold(h.ctx)
		if err != nil || len(stored.Waiting) != 10 || !stored.Since.Equal(since) {
			t.Errorf("stored hold %+v, %v", stored, err)
		}
	})
	t.Run("a release survives a restart", func(t *testing.T) {
		h, vms := lose(t)
		if got := h.reconcile(vms...); len(got) != 0 {
			t.Fatalf("terminated %v", got)
		}
		h.ok(h.app.ReleaseOrphans(h.ctx))
		h.clock.Advance(time.Minute)
		h.restart(nil) // the records are still empty: the same state
		if s := h.held(); !s.HoldSince.IsZero() {
			t.Fatalf("held again after a restart: %+v", s)
		}
		if got := h.reconcile(vms...); len(got) != 10 {
			t.Errorf("terminated %v after the release and a restart, want the 10 released", got)
		}
	})
	for name, loseAgain := range map[string]func(h *harness){
		"a later loss of the bucket holds again":      func(h *harness) { h.store.LoseInstances() },
		"records emptied key by key later hold again": func(h *harness) { h.store.ClearInstances() },
	} {
		t.Run(name, func(t *testing.T) {
			h, vms := lose(t)
			// The group is rebuilt during the hold (its target is kept)...
			h.settle()
			var rebuilt []app.InventoryItem
			for _, in := range h.instances("g") {
				if in.Live() && in.CloudID != "" {
					rebuilt = append(rebuilt, app.InventoryItem{CloudID: in.CloudID, InstanceID: in.ID, Group: "g", State: domain.CloudRunning, CreatedAt: in.CreatedAt})
				}
			}
			if len(rebuilt) != 10 {
				t.Fatalf("rebuilt %d", len(rebuilt))
			}
			// ...and the operator releases the old VMs once it is.
			h.clock.Advance(time.Hour)
			h.ok(h.app.ReleaseOrphans(h.ctx))
			if got := h.reconcile(vms...); len(got) != 10 {
				t.Fatalf("terminated %v after the release", got)
			}
			// The state is lost again: the rebuilt VMs, created before the
			// release, now have no record either.
			h.clock.Advance(time.Hour)
			loseAgain(h)
			h.restart(nil)
			if s := h.held(); !s.HoldSince.Equal(h.clock.Now()) {
				t.Fatalf("no new hold after the second loss: %+v", s)
			}
			if got := h.reconcile(rebuilt...); len(got) != 0 {
				t.Errorf("the old release terminated %v after the state was lost again", got)
			}
		})
	}
}

// A release confirms the VMs held back when it is given, not every VM
// created before it: a later partial loss of the records (same bucket, not
// empty: no new state) still meets the plausibility valve, after a restart
// too, and the released VMs still meet the cap.
func TestOrphanReleaseConfirmsOnlyTheHeldVMs(t *testing.T) {
	h := fleet(t, 12)
	h.clock.Advance(time.Hour)
	var vms []app.InventoryItem
	for _, in := range h.instances("g") {
		vms = append(vms, app.InventoryItem{CloudID: in.CloudID, InstanceID: in.ID, Group: "g", State: domain.CloudRunning, CreatedAt: in.CreatedAt})
	}
	h.store.LoseInstances()
	h.restart(nil)
	if got := h.reconcile(vms...); len(got) != 0 {
		t.Fatalf("terminated %v during the hold", got)
	}
	h.ok(h.app.ReleaseOrphans(h.ctx))
	stored, _, err := h.store.GetOrphanHold(h.ctx)
	if err != nil || len(stored.Released) != 12 {
		t.Fatalf("stored hold %+v, %v: want the 12 held VMs released", stored, err)
	}
	h.restart(nil)
	// The released VMs bypass the valve (12 of 12 listed), within the cap.
	got := h.reconcile(vms...)
	if len(got) != 10 {
		t.Fatalf("terminated %v after the release, want 10 (the cap)", got)
	}
	if got := h.reconcile(terminating(vms, got)...); len(got) != 2 {
		t.Fatalf("second pass terminated %v, want the 2 left", got)
	}

	// The group is rebuilt; later most of its records are lost, the bucket
	// and some records staying: its VMs, created before the release, look
	// like orphans. A restart (or a new leader) resumes the release.
	h.settle()
	live := 0
	for _, in := range h.instances("g") {
		if in.Live() && in.CloudID != "" {
			live++
		}
	}
	if live == 0 {
		t.Fatal("the group was not rebuilt")
	}
	h.clock.Advance(time.Hour)
	var lost []app.InventoryItem
	for i := range live + 1 { // most of the listed VMs
		lost = append(lost, orphan(i, h.clock.Now().Add(-90*time.Minute)))
	}
	h.restart(nil)
	if s := h.held(); !s.HoldSince.IsZero() {
		t.Fatalf("a new hold: %+v", s)
	}
	if got := h.reconcile(lost...); len(got) != 0 {
		t.Errorf("terminated %v: the release bypassed the valve for VMs it never held", got)
	}
	if s := h.held(); s.Held[app.HeldImplausible] != len(lost) {
		t.Errorf("held %+v, want the %d as implausible", s, len(lost))
	}
}

// Instance records created after a fresh install's hold ended and lost
// before any reconciler pass are noticed at the next load: the first
// record created stores hadRecords.
func TestFirstInstanceRecordIsStoredInTheHold(t *testing.T) {
	h := fleet(t, 0)
	h.clock.Advance(25 * time.Hour) // the fresh install's hold is over
	h.ok(h.app.IncreaseSize(h.ctx, "g", 3))
	h.settle()
	stored, _, err := h.store.GetOrphanHold(h.ctx)
	if err != nil || !stored.HadRecords {
		t.Fatalf("stored hold %+v, %v: want hadRecords once a record exists", stored, err)
	}
	h.store.ClearInstances()
	h.restart(nil)
	if s := h.held(); !s.HoldSince.Equal(h.clock.Now()) {
		t.Fatalf("no new hold after the records were lost: %+v", s)
	}
}
