package app_test

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"testing"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// storedInstances returns the store's instance records by id.
func storedInstances(t *testing.T, h *harness) map[string]domain.Instance {
	t.Helper()
	is, err := h.store.ListInstances(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]domain.Instance{}
	for _, v := range is {
		out[v.Instance.ID] = v.Instance
	}
	return out
}

func cachedInstances(a *app.App, group string) map[string]domain.Instance {
	out := map[string]domain.Instance{}
	for _, in := range a.Instances(group) {
		out[in.ID] = in
	}
	return out
}

// A standby that loaded the records, then followed some of the leader's
// writes and not the last ones, is promoted: it sees every record as
// stored (created, changed and removed since it last looked) without
// reading every record again, and its writes (compare-and-set on the
// revisions it holds) succeed.
func TestStandbyPromotionCatchesUpWithoutFullLoad(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 20, 0)})
	h.ok(h.app.IncreaseSize(h.ctx, "g", 4))
	h.settle()

	standby := h.newApp()
	if err := standby.SetConfig(h.ctx, []domain.NodeGroup{group("g", 0, 20, 0)}); err != nil {
		t.Fatal(err)
	}
	if err := standby.Follow(h.ctx); err != nil {
		t.Fatal(err)
	}
	if n := h.store.InstanceLists(); n != 2 {
		t.Fatalf("instance lists after the standby's load: %d, want 2 (leader, standby)", n)
	}

	// The leader goes on: a scale-up (new records), a scale-down (changed
	// records, then the purge removes a Deleted one).
	h.ok(h.app.IncreaseSize(h.ctx, "g", 3))
	h.settle()
	if err := standby.Follow(h.ctx); err != nil {
		t.Fatal(err)
	}
	var victim domain.Instance
	for _, in := range h.instances("g") {
		if in.State == domain.StateRunning {
			victim = in
			break
		}
	}
	h.ok(h.app.DeleteNodes(h.ctx, "g", []app.NodeRef{{ProviderID: victim.ProviderID}}))
	h.settle()
	h.ok(h.app.IncreaseSize(h.ctx, "g", 2))
	// The leader's last writes, right before it dies: a removal and a
	// change the standby has not seen.
	stored, err := h.store.GetInstance(h.ctx, "g", victim.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Instance.State != domain.StateDeleted {
		t.Fatalf("victim is %s, want Deleted", stored.Instance.State)
	}
	if _, err := h.store.DeleteInstance(h.ctx, "g", victim.ID, stored.Revision); err != nil {
		t.Fatal(err)
	}
	h.app.Pass(h.ctx)
	h.app.Stop()

	lists := h.store.InstanceLists()
	if err := standby.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	if n := h.store.InstanceLists(); n != lists {
		t.Fatalf("the promotion listed every instance (%d lists, want %d)", n, lists)
	}
	want := storedInstances(t, h)
	got := cachedInstances(standby, "g")
	if !reflect.DeepEqual(got, want) {
		ids := func(m map[string]domain.Instance) []string {
			var out []string
			for id, in := range m {
				out = append(out, fmt.Sprintf("%s:%s", id, in.State))
			}
			sort.Strings(out)
			return out
		}
		t.Fatalf("promoted standby holds %v, store %v", ids(got), ids(want))
	}
	if _, ok := got[victim.ID]; ok {
		t.Fatalf("removed record %s still cached", victim.ID)
	}
	if err := standby.CheckIndex(); err != nil {
		t.Fatal(err)
	}
	// It leads on from there: every write is a compare-and-set on the
	// revisions it caught up to.
	h.app = standby
	h.settle()
	running := 0
	for _, in := range h.instances("g") {
		if in.State == domain.StateRunning {
			running++
		}
	}
	if running != 8 {
		t.Fatalf("%d running after the promotion, want 8: %v", running, h.byState("g"))
	}
}

// A leader that loses leadership throws its standby copy away (its cache
// followed its own writes, some of unknown outcome): following again
// lists every record.
func TestStandbyAfterLeadingListsAgain(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 20, 0)})
	h.ok(h.app.IncreaseSize(h.ctx, "g", 2))
	h.settle()
	h.app.Stop()
	lists := h.store.InstanceLists()
	if err := h.app.Follow(h.ctx); err != nil {
		t.Fatal(err)
	}
	if n := h.store.InstanceLists(); n != lists+1 {
		t.Fatalf("instance lists: %d, want %d", n, lists+1)
	}
	if err := h.app.Follow(h.ctx); err != nil {
		t.Fatal(err)
	}
	if n := h.store.InstanceLists(); n != lists+1 {
		t.Fatalf("a second follow listed again: %d lists, want %d", n, lists+1)
	}
}

// A recreated instances store (state lost) cannot be caught up with: the
// promotion lists it.
func TestStandbyRecreatedStoreListsAgain(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 20, 0)})
	h.ok(h.app.IncreaseSize(h.ctx, "g", 2))
	h.settle()
	standby := h.newApp()
	if err := standby.Follow(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.app.Stop()
	h.store.LoseInstances()
	lists := h.store.InstanceLists()
	if err := standby.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := h.store.InstanceLists(); n != lists+1 {
		t.Fatalf("instance lists: %d, want %d", n, lists+1)
	}
	if got := standby.Instances("g"); len(got) != 0 {
		t.Fatalf("promoted standby holds %d records of the lost store", len(got))
	}
}
