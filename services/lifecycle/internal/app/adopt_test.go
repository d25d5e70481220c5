package app_test

import (
	"testing"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// adopter is a group that adopts existing Nodes labelled role=<id>.
func adopter(id string, max, target int) domain.NodeGroup {
	g := group(id, 0, max, target)
	g.AdoptExisting = true
	return g
}

// foreignNode is a Ready Node nodesmith did not create, recognisable by
// group g's node template, on a VM of the dev account.
func foreignNode(name, g, cloudID string) ports.Node {
	return ports.Node{
		Name: name, Ready: true, InternalIP: "10.9.0.1",
		ProviderID: "externalgrpc://tencentcloud/dev/ap-guangzhou/" + cloudID,
		Labels:     map[string]string{"role": g, "kubernetes.io/hostname": name},
		Taints:     []ports.Taint{{Key: "dedicated", Value: g, Effect: "NoSchedule"}},
	}
}

func TestAdoptExisting(t *testing.T) {
	tests := []struct {
		name   string
		groups []domain.NodeGroup
		node   ports.Node
		// wantGroup adopts the node ("" = nobody).
		wantGroup string
		// wantReason is the notice about a node not adopted.
		wantReason string
	}{
		{
			name:      "recognised by one adopting group",
			groups:    []domain.NodeGroup{adopter("gpu", 5, 0), group("cpu", 0, 5, 0)},
			node:      foreignNode("n1", "gpu", "ins-aaa"),
			wantGroup: "gpu",
		},
		{
			name:   "the group does not adopt",
			groups: []domain.NodeGroup{group("gpu", 0, 5, 0)},
			node:   foreignNode("n1", "gpu", "ins-aaa"),
		},
		{
			name:   "a taint the template does not have",
			groups: []domain.NodeGroup{adopter("gpu", 5, 0)},
			node: func() ports.Node {
				n := foreignNode("n1", "gpu", "ins-aaa")
				n.Taints = append(n.Taints, ports.Taint{Key: "special", Effect: "NoSchedule"})
				return n
			}(),
		},
		{
			name:   "a VM of another account",
			groups: []domain.NodeGroup{adopter("gpu", 5, 0)},
			node: func() ports.Node {
				n := foreignNode("n1", "gpu", "ins-aaa")
				n.ProviderID = "externalgrpc://tencentcloud/prod/ap-guangzhou/ins-aaa"
				return n
			}(),
		},
		{
			name:   "not Ready",
			groups: []domain.NodeGroup{adopter("gpu", 5, 0)},
			node: func() ports.Node {
				n := foreignNode("n1", "gpu", "ins-aaa")
				n.Ready = false
				return n
			}(),
		},
		{
			name: "recognised by two adopting groups: reported, not guessed",
			groups: func() []domain.NodeGroup {
				a, b := adopter("gpu", 5, 0), adopter("gpu2", 5, 0)
				b.NodeTemplate = a.NodeTemplate
				return []domain.NodeGroup{a, b}
			}(),
			node:       foreignNode("n1", "gpu", "ins-aaa"),
			wantReason: app.ReasonAdoptionAmbiguous,
		},
		{
			name:       "the group is at its max size",
			groups:     []domain.NodeGroup{adopter("gpu", 2, 2)},
			node:       foreignNode("n1", "gpu", "ins-aaa"),
			wantReason: app.ReasonAdoptionRefused,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.groups, withCluster())
			targets := map[string]int{}
			for _, g := range tc.groups {
				targets[g.ID] = h.target(g.ID)
			}
			h.cluster.Put(tc.node)
			eventually(t, func() bool { _, ok := h.app.Node(tc.node.Name); return ok && h.app.NodesSynced() })
			for range 3 {
				h.app.Pass(h.ctx)
			}

			var adopted []domain.Instance
			for _, in := range h.instances("") {
				if in.Adopted {
					adopted = append(adopted, in)
				}
			}
			if tc.wantGroup == "" {
				if len(adopted) != 0 {
					t.Fatalf("adopted %+v", adopted)
				}
				for id, want := range targets {
					if h.target(id) != want {
						t.Errorf("target of %s changed to %d", id, h.target(id))
					}
				}
				if n, _ := h.cluster.Get(tc.node.Name); n.Labels[app.LabelInstance] != "" {
					t.Errorf("a node not adopted was labelled %v", n.Labels)
				}
				if tc.wantReason != "" {
					if got := h.notices.Notices(tc.wantReason); len(got) != 1 || got[0].Node != tc.node.Name || !got[0].Warning {
						t.Errorf("notices %+v, want one %s warning on the node (reported once)", h.notices.Notices(""), tc.wantReason)
					}
				}
				return
			}
			if len(adopted) != 1 {
				t.Fatalf("adopted %d instances, want 1", len(adopted))
			}
			in := adopted[0]
			if in.Group != tc.wantGroup || in.State != domain.StateRunning || in.Node() != tc.node.Name ||
				in.ProviderID != tc.node.ProviderID || in.CloudID != "ins-aaa" || in.PrivateIP != "10.9.0.1" || !in.Live() {
				t.Errorf("adopted record %+v", in)
			}
			if h.target(tc.wantGroup) != targets[tc.wantGroup]+1 {
				t.Errorf("target %d, want %d (raised for the adopted node)", h.target(tc.wantGroup), targets[tc.wantGroup]+1)
			}
			n, _ := h.cluster.Get(tc.node.Name)
			if n.Labels[app.LabelGroup] != tc.wantGroup || n.Labels[app.LabelInstance] != in.ID {
				t.Errorf("adopted node labels %v", n.Labels)
			}
			if len(h.notices.Notices(app.ReasonAdopted)) != 1 {
				t.Errorf("notices %+v", h.notices.Notices(""))
			}
			if c := h.cmds.Snapshot(); len(c.Creates) != 0 || len(c.Hooks) != 0 {
				t.Errorf("adoption issued commands: %d creates, %d hooks", len(c.Creates), len(c.Hooks))
			}

			// CA deletes it like any node (by name): the before_delete hook
			// runs on its address, then its VM is terminated by id.
			h.ok(h.app.DeleteNodes(h.ctx, tc.wantGroup, []app.NodeRef{{Name: tc.node.Name}}))
			h.settle()
			c := h.cmds.Snapshot()
			if len(c.Hooks) != 1 || c.Hooks[0].Host != "10.9.0.1" || c.Hooks[0].Kind != domain.HookBeforeDelete {
				t.Errorf("hooks %+v", c.Hooks)
			}
			// Its VM lacks our cluster tag: the command says it was adopted,
			// so the cloud adapter accepts it untagged (never another
			// cluster's).
			if len(c.Terminates) != 1 || c.Terminates[0].Instances[0].CloudID != "ins-aaa" ||
				!c.Terminates[0].Instances[0].Adopted || c.Terminates[0].ClusterID != "nodesmith" {
				t.Errorf("terminates %+v", c.Terminates)
			}
			if got := h.instance(in.ID); got.State != domain.StateDeleted {
				t.Errorf("adopted instance ends %s", got.State)
			}
		})
	}
}

// A Node whose VM an instance record already owns (registered under an
// unexpected name and providerID) is never adopted a second time.
func TestAdoptionNeverDuplicatesAnInstance(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{adopter("gpu", 5, 0)}, withCluster())
	h.ok(h.app.IncreaseSize(h.ctx, "gpu", 1))
	h.settle()
	in := h.instances("gpu")[0]
	if in.State != domain.StateJoined || in.CloudID == "" {
		t.Fatalf("instance %s %q", in.State, in.CloudID)
	}
	n := foreignNode("some-other-name", "gpu", in.CloudID)
	n.ProviderID = "qcloud:///ap-guangzhou-3/" + in.CloudID
	h.cluster.Put(n)
	eventually(t, func() bool { _, ok := h.app.Node(n.Name); return ok })
	h.app.Pass(h.ctx)
	h.app.Pass(h.ctx)
	if len(h.instances("gpu")) != 1 || h.target("gpu") != 1 {
		t.Errorf("instances %v, target %d", h.byState("gpu"), h.target("gpu"))
	}
	if got := h.notices.Notices(app.ReasonAdoptionRefused); len(got) != 1 {
		t.Errorf("notices %+v", h.notices.Notices(""))
	}
}
