package app_test

import (
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// runningWithNode brings one instance of group g to Running with a Ready
// Node and returns it.
func (h *harness) runningWithNode(g string) domain.Instance {
	h.t.Helper()
	h.ok(h.app.IncreaseSize(h.ctx, g, 1))
	h.settle()
	var in domain.Instance
	for _, x := range h.instances(g) {
		if x.State == domain.StateJoined {
			in = x
		}
	}
	if in.ID == "" {
		h.t.Fatalf("no Joined instance: %v", h.byState(g))
	}
	h.cluster.Put(ports.Node{Name: in.ID, ProviderID: in.ProviderID, Ready: true})
	eventually(h.t, func() bool { n, _ := h.app.Node(in.ID); return n.Ready })
	h.app.Pass(h.ctx)
	in = h.instance(in.ID)
	if in.State != domain.StateRunning {
		h.t.Fatalf("instance %s, want Running", in.State)
	}
	return in
}

func (h *harness) instance(id string) domain.Instance {
	h.t.Helper()
	for _, in := range h.app.Instances("") {
		if in.ID == id {
			return in
		}
	}
	h.t.Fatalf("instance %s not found", id)
	return domain.Instance{}
}

// The policy for a Running instance whose Node is deleted by someone else
// (issue #3): wait the grace period for the Node to register again; if it
// does not, replace the instance: its VM is terminated through the normal
// deletion path (without the before_delete hook) and the unchanged target
// makes the dispatcher create a new one.
func TestNodeDeletedBySomeoneElsePolicy(t *testing.T) {
	grace := domain.DefaultPolicy().NodeDeletedGrace
	tests := []struct {
		name string
		// noSynced: the cluster adapter does not say when its initial list
		// is complete.
		noSynced bool
		// noGrace sets NodeDeletedGrace to zero.
		noGrace bool
		// act removes the Node (and maybe brings it back) and advances the
		// clock.
		act          func(h *harness, in domain.Instance)
		wantReplaced bool
	}{
		{
			name: "not registered again within the grace period: replaced",
			act: func(h *harness, in domain.Instance) {
				h.deleteNodeAndWait(in.ID)
				h.clock.Advance(grace - time.Second)
				h.app.Pass(h.ctx)
				if got := h.instance(in.ID); got.State != domain.StateRunning || !got.NodeLost() {
					h.t.Fatalf("within the grace period: %s lost=%v", got.State, got.NodeLost())
				}
				h.clock.Advance(time.Second)
			},
			wantReplaced: true,
		},
		{
			name: "registered again within the grace period: kept",
			act: func(h *harness, in domain.Instance) {
				h.deleteNodeAndWait(in.ID)
				h.clock.Advance(grace / 2)
				h.app.Pass(h.ctx)
				h.cluster.Put(ports.Node{Name: in.ID, ProviderID: in.ProviderID, Ready: true})
				eventually(h.t, func() bool { _, ok := h.app.Node(in.ID); return ok })
				h.app.Pass(h.ctx)
				h.clock.Advance(grace)
			},
		},
		{
			name:    "no grace period: replaced at once",
			noGrace: true,
			act: func(h *harness, in domain.Instance) {
				h.deleteNodeAndWait(in.ID)
			},
			wantReplaced: true,
		},
		{
			name: "deleted while lifecycle was down: seen once the new watch is synced",
			act: func(h *harness, in domain.Instance) {
				h.app.Stop()
				if err := h.cluster.DeleteNode(h.ctx, in.ID); err != nil {
					h.t.Fatal(err)
				}
				h.restart(nil)
				h.watch()
				eventually(h.t, h.app.NodesSynced)
				h.app.Pass(h.ctx)
				if got := h.instance(in.ID); !got.NodeLost() {
					h.t.Fatalf("the missing node was not noticed after the restart: %+v", got.LastError)
				}
				h.clock.Advance(grace)
			},
			wantReplaced: true,
		},
		{
			name:     "an adapter without NodesSynced: absence is trusted after its first change",
			noSynced: true,
			act: func(h *harness, in domain.Instance) {
				h.app.Stop()
				if err := h.cluster.DeleteNode(h.ctx, in.ID); err != nil {
					h.t.Fatal(err)
				}
				h.restart(nil)
				h.watch()
				h.clock.Advance(2 * grace)
				h.app.Pass(h.ctx)
				if got := h.instance(in.ID); got.NodeLost() || got.State != domain.StateRunning {
					h.t.Fatalf("absence trusted before the watch was known complete: %s", got.State)
				}
				// Any change proves the initial list was delivered (repeated:
				// the new watch may not have started yet).
				ready := false
				eventually(h.t, func() bool {
					ready = !ready
					h.cluster.Put(ports.Node{Name: "someone-else", Ready: ready})
					return h.app.NodesSynced()
				})
				h.app.Pass(h.ctx)
				h.clock.Advance(grace)
			},
			wantReplaced: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cluster := withCluster()
			if tc.noSynced {
				cluster = withClusterNoSynced()
			}
			h := newHarness(t, []domain.NodeGroup{group("g", 0, 5, 0)}, cluster, withOptions(func(o *app.Options) {
				if tc.noGrace {
					o.Policy.NodeDeletedGrace = 0
				}
			}))
			in := h.runningWithNode("g")
			hooksBefore := len(h.cmds.Snapshot().Hooks)
			tc.act(h, in)
			h.app.Pass(h.ctx)

			got := h.instance(in.ID)
			if h.target("g") != 1 {
				t.Errorf("target %d, want 1 (never changed by this policy)", h.target("g"))
			}
			if !tc.wantReplaced {
				if got.State != domain.StateRunning || got.NodeLost() || got.LastError != nil {
					t.Fatalf("kept instance: %s lost=%v err=%+v", got.State, got.NodeLost(), got.LastError)
				}
				if live := h.byState("g"); len(h.instances("g")) != 1 {
					t.Errorf("instances %v, want only the kept one", live)
				}
				return
			}
			if got.State != domain.StateDeleting || !got.InFlight {
				t.Fatalf("lost instance %s (in flight %v), want Deleting with its terminate command", got.State, got.InFlight)
			}
			terminated := false
			for _, c := range h.cmds.Snapshot().Terminates {
				for _, r := range c.Instances {
					terminated = terminated || (r.InstanceID == in.ID && r.CloudID == in.CloudID)
				}
			}
			if !terminated {
				t.Errorf("no terminate command for the VM %s", in.CloudID)
			}
			for _, hk := range h.cmds.Snapshot().Hooks[hooksBefore:] {
				if hk.InstanceID == in.ID {
					t.Errorf("the before_delete hook ran for an instance whose node is gone")
				}
			}
			// The target still counts it: the next pass creates a replacement.
			h.app.Pass(h.ctx)
			live := 0
			for _, x := range h.instances("g") {
				if x.Live() {
					live++
					if x.ID == in.ID {
						t.Errorf("the replaced instance is still live")
					}
				}
			}
			if live != 1 {
				t.Errorf("live instances %d, want 1 replacement", live)
			}
			h.settle()
			if got := h.instance(in.ID); got.State != domain.StateDeleted {
				t.Errorf("replaced instance ends %s, want Deleted", got.State)
			}
		})
	}
}

// deleteNodeAndWait deletes a Node as someone else would and waits for the
// watcher to see it, then runs a pass.
func (h *harness) deleteNodeAndWait(name string) {
	h.t.Helper()
	if err := h.cluster.DeleteNode(h.ctx, name); err != nil {
		h.t.Fatal(err)
	}
	eventually(h.t, func() bool { _, ok := h.app.Node(name); return !ok })
	h.app.Pass(h.ctx)
}

// Deleting the Node is the last effect of an instance's closing
// transition. A leader that stops between writing Deleted and deleting the
// Node leaves it behind: the next check of every instance (a new leader's
// synced watch, or any change of the Nodes) deletes it. A Node that only
// shares the name, not the providerID, is left alone.
func TestNodeOfADeletedInstanceIsDeleted(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 5, 0)}, withCluster())
	in := h.runningWithNode("g")
	h.ok(h.app.DeleteNodes(h.ctx, "g", []app.NodeRef{{ProviderID: in.ProviderID}}))
	h.settle()
	if got := h.instance(in.ID); got.State != domain.StateDeleted {
		t.Fatalf("instance %s, want Deleted", got.State)
	}
	eventually(t, func() bool { _, ok := h.app.Node(in.ID); return !ok })

	// The effect "lost": the Node is back as it was (a leader stopped
	// before deleting it), and an unrelated Node reuses the name pattern
	// with another providerID.
	h.cluster.Put(ports.Node{Name: in.ID, ProviderID: in.ProviderID, Ready: true})
	h.cluster.Put(ports.Node{Name: "other", ProviderID: "nodesmith:///g/not-ours", Ready: true})
	eventually(t, func() bool { _, a := h.app.Node(in.ID); _, b := h.app.Node("other"); return a && b })
	h.app.Pass(h.ctx)
	if _, ok := h.cluster.Get(in.ID); ok {
		t.Errorf("the Node of the Deleted instance %s is still there", in.ID)
	}
	if _, ok := h.cluster.Get("other"); !ok {
		t.Error("a Node that is not the instance's was deleted")
	}
}

// A backlog of node changes (every Running instance's Node missing, as a
// new leader's first check against an emptied cluster finds) is applied
// MaxEventsPerPass at a time: the pass still starts and publishes the
// creations behind it, and the next passes apply the rest.
func TestNodeChangeBacklogDoesNotHoldBackCommands(t *testing.T) {
	const running, limit = 8, 3
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 20, 0)}, withCluster(),
		withOptions(func(o *app.Options) { o.MaxEventsPerPass = limit }))
	h.ok(h.app.IncreaseSize(h.ctx, "g", running))
	h.settle()
	for _, in := range h.instances("g") {
		h.cluster.Put(ports.Node{Name: in.ID, ProviderID: in.ProviderID, Ready: true})
	}
	for _, in := range h.instances("g") {
		eventually(t, func() bool { n, _ := h.app.Node(in.ID); return n.Ready })
	}
	for range running {
		h.app.Pass(h.ctx)
	}
	if got := h.byState("g")[domain.StateRunning]; got != running {
		t.Fatalf("%d Running, want %d: %v", got, running, h.byState("g"))
	}
	for _, in := range h.instances("g") {
		if err := h.cluster.DeleteNode(h.ctx, in.ID); err != nil {
			t.Fatal(err)
		}
	}
	for _, in := range h.instances("g") {
		eventually(t, func() bool { _, ok := h.app.Node(in.ID); return !ok })
	}
	h.ok(h.app.IncreaseSize(h.ctx, "g", 1))
	creates := len(h.cmds.Snapshot().Creates)
	lost := func() int {
		n := 0
		for _, in := range h.instances("g") {
			if in.NodeLost() {
				n++
			}
		}
		return n
	}
	h.app.Pass(h.ctx)
	if got := lost(); got != limit {
		t.Fatalf("one pass marked %d instances' Node lost, want %d", got, limit)
	}
	if got := len(h.cmds.Snapshot().Creates); got != creates+1 {
		t.Fatalf("the pass published %d creates, want 1", got-creates)
	}
	for range running / limit {
		h.app.Pass(h.ctx)
	}
	if got := lost(); got != running {
		t.Fatalf("after more passes %d instances' Node lost, want %d", got, running)
	}
}
