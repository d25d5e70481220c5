package service_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/metrics/metricstest"
	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/service"
)

// State loss: the instances bucket is deleted under a running fleet and
// lifecycle starts again from empty state, while the cloud holds the
// fleet's tagged VMs, older than the orphan grace. The reconciler
// terminates none of them and reports them until an operator releases
// them; the group's target is met with new VMs meanwhile.
func TestStateLossTerminatesNothing(t *testing.T) {
	cfg := fastConfig(testConfig)
	cfg.ReconcileInterval = 50 * time.Millisecond
	cfg.OrphanGrace = 10 * time.Millisecond
	reg := prometheus.NewRegistry()
	s := newStack(t, cfg, service.Deps{Registry: reg})
	metric := func(name string, labels map[string]string) float64 { return metricstest.Value(t, reg, name, labels) }
	mustOK(t, s.increase("workers", 3))
	eventually(t, "3 Running", func() bool { return countIn(s.instances("workers"), domain.StateRunning) == 3 })
	var fleet []string
	for _, vm := range s.workers.Cloud.Running() {
		fleet = append(fleet, vm.CloudID)
	}

	s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, admin := s.env.ConnectAdmin(t) // losing state is no service's right
	if err := admin.DeleteKeyValue(ctx, messaging.BucketInstances); err != nil {
		t.Fatal(err)
	}
	s.start() // the topology is ensured again: an empty instances bucket

	running := func() []string {
		var out []string
		for _, vm := range s.workers.Cloud.Running() {
			out = append(out, vm.CloudID)
		}
		return out
	}
	held := map[string]string{"reason": "empty_start"}
	eventually(t, "the fleet held back by the start-up hold", func() bool {
		return metric("nodesmith_lifecycle_orphans_held_back", held) == 3
	})
	// Many reconciler passes later, none of them was terminated, though
	// the target of 3 was met again with new VMs.
	found := metric("nodesmith_lifecycle_orphans_found_total", nil)
	eventually(t, "10 more passes finding them", func() bool {
		return metric("nodesmith_lifecycle_orphans_found_total", nil) >= found+30
	})
	eventually(t, "3 new instances Running", func() bool { return countIn(s.instances("workers"), domain.StateRunning) == 3 })
	for _, id := range fleet {
		if !slices.Contains(running(), id) {
			t.Fatalf("VM %s of the fleet was terminated after the state loss", id)
		}
	}
	if n := metric("nodesmith_lifecycle_orphans_terminated_total", nil); n != 0 {
		t.Fatalf("%v orphans terminated", n)
	}
	if n := metric("nodesmith_lifecycle_orphans_held_back", held); n != 3 {
		t.Fatalf("held back %v, want 3", n)
	}

	// The hold is stored, not kept in the leader's memory: a restart (a
	// new leader, records present now) keeps holding from the same start.
	stored := readHold(t, s)
	if !stored.Active(time.Now()) || stored.Held["empty_start"] != 3 || len(stored.Waiting) != 3 {
		t.Fatalf("stored hold %+v", stored)
	}
	s.stop()
	s.start()
	found = metric("nodesmith_lifecycle_orphans_found_total", nil)
	eventually(t, "the new leader finding them in 10 passes", func() bool {
		return metric("nodesmith_lifecycle_orphans_found_total", nil) >= found+30
	})
	if n := metric("nodesmith_lifecycle_orphans_held_back", held); n != 3 {
		t.Fatalf("held back %v after a restart, want 3", n)
	}
	if again := readHold(t, s); !again.Since.Equal(stored.Since) || !again.Until.Equal(stored.Until) {
		t.Fatalf("the restart changed the hold: %+v, was %+v", again, stored)
	}
	for _, id := range fleet {
		if !slices.Contains(running(), id) {
			t.Fatalf("VM %s of the fleet was terminated after a restart during the hold", id)
		}
	}

	// An operator confirms they are orphans: they go.
	mustOK(t, s.request(&lifecyclev1.Request{Op: &lifecyclev1.Request_ReleaseOrphans{ReleaseOrphans: &lifecyclev1.ReleaseOrphans{}}}))
	eventually(t, "the released VMs terminated", func() bool {
		for _, id := range fleet {
			if slices.Contains(running(), id) {
				return false
			}
		}
		return true
	})
	if n := metric("nodesmith_lifecycle_orphans_held_back", held); n != 0 {
		t.Errorf("held back %v after the release", n)
	}
	if st := countIn(s.instances("workers"), domain.StateRunning); st != 3 || len(running()) != 3 {
		t.Errorf("%d Running instances, %d VMs after the release, want 3 and 3", st, len(running()))
	}

	// The release outlives a restart.
	s.stop()
	s.start()
	if h := readHold(t, s); h.ReleasedAt.IsZero() || h.Active(time.Now()) {
		t.Errorf("stored hold after the release and a restart: %+v", h)
	}
	time.Sleep(time.Second) // many reconciler passes
	if n := metric("nodesmith_lifecycle_orphans_held_back", held); n != 0 {
		t.Errorf("held back %v after a restart following the release", n)
	}
}

// readHold reads the orphan hold lifecycle stored beside the groups.
func readHold(t *testing.T, s *stack) messaging.OrphanHold {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := s.env.JS.KeyValue(ctx, messaging.BucketGroups)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, messaging.KeyOrphanHold)
	if err != nil {
		t.Fatalf("reading %s: %v", messaging.KeyOrphanHold, err)
	}
	h, err := messaging.UnmarshalOrphanHold(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	return h
}
