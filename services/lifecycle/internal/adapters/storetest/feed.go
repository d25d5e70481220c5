package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// FeedStore is a Store with a change feed.
type FeedStore interface {
	ports.Store
	ports.InstanceFeed
}

// RunFeed is the contract of ports.InstanceFeed: the changes since a
// position are every record created or changed since (at its latest
// revision) and every record removed since, and nothing older.
func RunFeed(t *testing.T, newStore func(t *testing.T) FeedStore) {
	t.Run("changes since a position", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		mk := func(id string) uint64 {
			t.Helper()
			rev, err := s.CreateInstance(ctx, domain.Instance{ID: id, Group: "g", State: domain.StatePending})
			if err != nil {
				t.Fatal(err)
			}
			return rev
		}
		old := mk("old")
		changed := mk("changed")
		removed := mk("removed")
		pos, err := s.InstancesPos(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if pos.Rev != removed {
			t.Fatalf("position %d, want the last revision %d", pos.Rev, removed)
		}
		if ch, err := s.InstancesSince(ctx, pos); err != nil || len(ch.Changed)+len(ch.Removed) != 0 || ch.Pos != pos {
			t.Fatalf("InstancesSince(now) = %+v, %v; want no change", ch, err)
		}
		rev, err := s.UpdateInstance(ctx, domain.Instance{ID: "changed", Group: "g", State: domain.StateCreating}, changed)
		if err != nil {
			t.Fatal(err)
		}
		rev, err = s.UpdateInstance(ctx, domain.Instance{ID: "changed", Group: "g", State: domain.StateJoined}, rev)
		if err != nil {
			t.Fatal(err)
		}
		gone, err := s.DeleteInstance(ctx, "g", "removed", removed)
		if err != nil {
			t.Fatal(err)
		}
		added := mk("added")
		ch, err := s.InstancesSince(ctx, pos)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]ports.VersionedInstance{}
		for _, v := range ch.Changed {
			got[v.Instance.ID] = v
		}
		if len(got) != 2 || got["changed"].Revision != rev || got["changed"].Instance.State != domain.StateJoined || got["added"].Revision != added {
			t.Errorf("changed = %+v; want changed at %d (Joining) and added at %d", ch.Changed, rev, added)
		}
		if len(ch.Removed) != 1 || ch.Removed["removed"] != gone {
			t.Errorf("removed = %v; want removed at %d", ch.Removed, gone)
		}
		if _, ok := got["old"]; ok || old == 0 {
			t.Errorf("an unchanged record is returned")
		}
		if ch.Pos.Rev != added || ch.Pos.Store != pos.Store {
			t.Errorf("next position %+v, want %d on %q", ch.Pos, added, pos.Store)
		}
		again, err := s.InstancesSince(ctx, ch.Pos)
		if err != nil || len(again.Changed)+len(again.Removed) != 0 {
			t.Errorf("InstancesSince(next) = %+v, %v; want no change", again, err)
		}
	})

	t.Run("another store is a gap", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		pos, err := s.InstancesPos(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pos.Store += "-other"
		if _, err := s.InstancesSince(ctx, pos); !errors.Is(err, ports.ErrFeedGap) {
			t.Errorf("InstancesSince(another store) = %v, want ErrFeedGap", err)
		}
	})
}
