package app

import (
	"context"
	"fmt"
	"maps"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// CheckIndex rebuilds the dispatcher's index from the cached records and
// reports any difference from the one kept incrementally.
func (a *App) CheckIndex() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	want := newInstIndex()
	for _, r := range a.insts {
		want.add(r.Instance)
	}
	got := a.idx
	if !maps.EqualFunc(got.byGroup, want.byGroup, maps.Equal) {
		return fmt.Errorf("byGroup: %v, want %v", got.byGroup, want.byGroup)
	}
	if !maps.Equal(got.live, want.live) {
		return fmt.Errorf("live: %v, want %v", got.live, want.live)
	}
	if !maps.Equal(got.active, want.active) {
		return fmt.Errorf("active: %d ids, want %d", len(got.active), len(want.active))
	}
	if !maps.EqualFunc(got.batches, want.batches, maps.Equal) {
		return fmt.Errorf("batches: %d, want %d", len(got.batches), len(want.batches))
	}
	for id := range a.published {
		if r, ok := a.insts[id]; !ok {
			return fmt.Errorf("published remembers unknown instance %s", id)
		} else if _, ok := domain.PendingCommand(r.Instance); !ok {
			return fmt.Errorf("published remembers %s, which has no command", id)
		}
	}
	return nil
}

// CheckAppliedIndex rebuilds the index of applied requests from the cached
// groups and reports any difference from the one kept incrementally.
func (a *App) CheckAppliedIndex() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	want := map[string]map[string]struct{}{}
	for id, g := range a.groups {
		for _, r := range g.g.Applied {
			if want[r.ID] == nil {
				want[r.ID] = map[string]struct{}{}
			}
			want[r.ID][id] = struct{}{}
		}
	}
	if !maps.EqualFunc(a.appliedIn, want, maps.Equal) {
		return fmt.Errorf("applied requests index: %v, want %v", a.appliedIn, want)
	}
	return nil
}

// Follow runs one standby step (RunStandby's): a full list without a
// standby copy, else a catch-up.
func (a *App) Follow(ctx context.Context) error { return a.follow(ctx) }
