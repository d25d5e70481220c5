package app_test

import (
	"testing"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// The rule of what wins between the file and the admin API (see
// App.ApplyConfig).
func TestWhatWinsBetweenFileAndAPI(t *testing.T) {
	fileG := group("workers", 1, 10, 3) // targetSize 3: the initial target
	h := newHarness(t, []domain.NodeGroup{fileG})
	if h.target("workers") != 3 {
		t.Fatalf("initial target %d, want the file's 3", h.target("workers"))
	}

	// CA moves the target at runtime.
	h.ok(h.app.IncreaseSize(h.ctx, "workers", 4))

	// An API group, and a file group with the same id as it.
	api := group("api", 0, 5, 1)
	h.ok(h.app.PutGroup(h.ctx, app.PutGroupRequest{Group: api}))

	t.Run("a reload applies the file's definition but never resets the target", func(t *testing.T) {
		changed := group("workers", 2, 12, 3)
		changed.NodeTemplate.Labels = map[string]string{"tier": "gold"}
		changed.Hooks.AfterCreated.Script = "kubeadm join --v=5"
		if err := h.app.SetConfig(h.ctx, []domain.NodeGroup{changed, group("api", 0, 50, 40)}); err != nil {
			t.Fatal(err)
		}
		g, _ := h.app.Group("workers")
		if g.MinSize != 2 || g.MaxSize != 12 || g.NodeTemplate.Labels["tier"] != "gold" || g.Hooks.AfterCreated.Script != "kubeadm join --v=5" {
			t.Errorf("file definition not applied: %+v", g)
		}
		if g.TargetSize != 7 {
			t.Errorf("target %d, want the runtime 7 (not the file's 3)", g.TargetSize)
		}
	})
	t.Run("the file never touches an API group", func(t *testing.T) {
		g, _ := h.app.Group("api")
		if g.Source != domain.SourceAPI || g.MaxSize != 5 || g.TargetSize != 1 {
			t.Errorf("api group changed by the file: %+v", g)
		}
	})
	t.Run("new bounds clamp the target", func(t *testing.T) {
		if err := h.app.SetConfig(h.ctx, []domain.NodeGroup{group("workers", 0, 5, 0)}); err != nil {
			t.Fatal(err)
		}
		if got := h.target("workers"); got != 5 {
			t.Errorf("target %d, want 7 clamped to 5", got)
		}
	})
	t.Run("the API cannot change or delete a file group", func(t *testing.T) {
		wantCode(t, errOnly(h.app.PutGroup(h.ctx, app.PutGroupRequest{Group: group("workers", 0, 99, 0), Upsert: true})), contract.CodeFailedPrecondition)
		wantCode(t, errOnly(h.app.DeleteGroup(h.ctx, "workers", 0)), contract.CodeFailedPrecondition)
		// ... but may set its target.
		h.ok(h.app.SetTargetSize(h.ctx, "workers", 5))
	})
	t.Run("a restart re-applies the file and keeps the target", func(t *testing.T) {
		h.restart([]domain.NodeGroup{group("workers", 0, 5, 1)})
		if got := h.target("workers"); got != 5 {
			t.Errorf("target after restart %d, want 5", got)
		}
	})
	t.Run("a group removed from the file is kept while it has instances", func(t *testing.T) {
		if err := h.app.SetConfig(h.ctx, []domain.NodeGroup{}); err != nil {
			t.Fatal(err)
		}
		if _, ok := h.app.Group("workers"); !ok {
			t.Fatal("group with instances was deleted")
		}
		// Once empty, the next application deletes it.
		h.settle()
		var refs []app.NodeRef
		for _, in := range h.instances("workers") {
			if in.Live() {
				refs = append(refs, app.NodeRef{ProviderID: in.ProviderID})
			}
		}
		// The group is still the file's (bounds unchanged), min 0.
		h.ok(h.app.DeleteNodes(h.ctx, "workers", refs))
		h.settle()
		if err := h.app.SetConfig(h.ctx, []domain.NodeGroup{}); err != nil {
			t.Fatal(err)
		}
		if _, ok := h.app.Group("workers"); ok {
			t.Error("empty group removed from the file still exists")
		}
		if _, ok := h.app.Group("api"); !ok {
			t.Error("the API group was deleted by the file")
		}
	})
}

func TestReapplyingAnUnchangedFileWritesNothing(t *testing.T) {
	g := group("workers", 0, 10, 2)
	h := newHarness(t, []domain.NodeGroup{g})
	w := h.store.Writes()
	// Same definition, as a reload with maps rebuilt would produce.
	same := group("workers", 0, 10, 2)
	same.Template.HookEnv = map[string]string{}
	if err := h.app.SetConfig(h.ctx, []domain.NodeGroup{same}); err != nil {
		t.Fatal(err)
	}
	if h.store.Writes() != w {
		t.Errorf("an unchanged file rewrote the group")
	}
}
