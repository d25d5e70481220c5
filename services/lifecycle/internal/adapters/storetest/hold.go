package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// HoldHarness is one ports.HoldStore under test, holding no orphan hold.
type HoldHarness struct {
	Store ports.HoldStore
	// LoseInstances deletes the instances store and recreates it empty,
	// as a lost state would.
	LoseInstances func(t *testing.T)
}

// RunHold runs the contract of ports.HoldStore against stores made by
// newStore (each subtest gets one without a hold).
func RunHold(t *testing.T, newStore func(t *testing.T) HoldHarness) {
	t.Run("hold round trip keeps every field", func(t *testing.T) {
		h, ctx := newStore(t), context.Background()
		if _, _, err := h.Store.GetOrphanHold(ctx); !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("GetOrphanHold of no hold: err = %v, want ErrNotFound", err)
		}
		want := SampleHold()
		rev, err := h.Store.PutOrphanHold(ctx, want, 0)
		if err != nil || rev == 0 {
			t.Fatalf("PutOrphanHold = %d, %v", rev, err)
		}
		got, grev, err := h.Store.GetOrphanHold(ctx)
		if err != nil || grev != rev {
			t.Fatalf("GetOrphanHold = rev %d, %v; want rev %d", grev, err, rev)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip changed the hold:\n got %+v\nwant %+v", got, want)
		}
	})

	t.Run("hold writes need the current revision", func(t *testing.T) {
		h, ctx := newStore(t), context.Background()
		if _, err := h.Store.PutOrphanHold(ctx, SampleHold(), 7); !errors.Is(err, ports.ErrConflict) {
			t.Errorf("PutOrphanHold at a revision of no hold: err = %v, want ErrConflict", err)
		}
		r1, err := h.Store.PutOrphanHold(ctx, SampleHold(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Store.PutOrphanHold(ctx, SampleHold(), 0); !errors.Is(err, ports.ErrConflict) {
			t.Errorf("PutOrphanHold at 0 over a stored hold: err = %v, want ErrConflict", err)
		}
		next := SampleHold()
		next.HadRecords = false
		r2, err := h.Store.PutOrphanHold(ctx, next, r1)
		if err != nil || r2 <= r1 {
			t.Fatalf("PutOrphanHold at the current revision = %d, %v (after %d)", r2, err, r1)
		}
		if _, err := h.Store.PutOrphanHold(ctx, SampleHold(), r1); !errors.Is(err, ports.ErrConflict) {
			t.Errorf("PutOrphanHold at a stale revision: err = %v, want ErrConflict", err)
		}
		got, rev, err := h.Store.GetOrphanHold(ctx)
		if err != nil || rev != r2 || got.HadRecords {
			t.Errorf("after a refused write: rev %d (want %d), HadRecords %v, %v", rev, r2, got.HadRecords, err)
		}
	})

	t.Run("the instances bucket id is stable and changes when the instances are lost", func(t *testing.T) {
		h, ctx := newStore(t), context.Background()
		a, err := h.Store.InstancesBucketID(ctx)
		if err != nil || a == "" {
			t.Fatalf("InstancesBucketID = %q, %v", a, err)
		}
		if b, err := h.Store.InstancesBucketID(ctx); err != nil || b != a {
			t.Errorf("InstancesBucketID again = %q, %v; want %q", b, err, a)
		}
		h.LoseInstances(t)
		if c, err := h.Store.InstancesBucketID(ctx); err != nil || c == a {
			t.Errorf("InstancesBucketID after the instances were lost = %q, %v; want other than %q", c, err, a)
		}
	})
}

// SampleHold returns a hold with every field set.
func SampleHold() ports.OrphanHold {
	return ports.OrphanHold{
		Since: t0, Until: t0.Add(10 * time.Minute), InstancesBucket: "bucket-1", HadRecords: true,
		ReleasedAt: t0.Add(time.Minute), Released: []string{"vm-1", "vm-2"},
		Held: map[string]int{"empty_start": 2, "cap": 1}, Waiting: []string{"vm-3"}, UpdatedAt: t0.Add(2 * time.Minute),
	}
}
