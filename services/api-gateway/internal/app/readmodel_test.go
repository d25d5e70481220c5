package app

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

func TestReadModelResolvesNodes(t *testing.T) {
	m := syncedModel()
	m.PutGroup("web", 1, testGroup("web", 0, 10, 3))
	m.PutGroup("gpu", 2, testGroup("gpu", 0, 4, 1))

	running := testInstance("web", "i-1", stateRunning)
	running.ProviderID, running.NodeName = "tencentcloud:///ap-guangzhou-3/ins-aaa", "10.0.0.1"
	m.PutInstance("web.i-1", 1, running)
	m.PutInstance("web.i-2", 2, testInstance("web", "i-2", statePending))
	gpu := testInstance("gpu", "i-3", stateCreating)
	m.PutInstance("gpu.i-3", 3, gpu)

	tests := []struct {
		name             string
		providerID, node string
		want             string
	}{
		{"real provider id", "tencentcloud:///ap-guangzhou-3/ins-aaa", "", "web"},
		{"placeholder provider id", "nodesmith:///web/i-2", "", "web"},
		{"fake node: name == providerID", "nodesmith:///gpu/i-3", "nodesmith:///gpu/i-3", "gpu"},
		{"node name only", "", "10.0.0.1", "web"},
		{"instance id as node name", "", "i-2", "web"},
		{"unknown provider id falls back to the node name", "aws:///x", "10.0.0.1", "web"},
		{"unmanaged node", "kind://control-plane", "control-plane", ""},
		{"placeholder of an unknown group", "nodesmith:///nope/i-2", "", ""},
		{"empty", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, ok := m.GroupForNode(tt.providerID, tt.node)
			got := ""
			if ok {
				got = g.Record.ID
			}
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("GroupForNode(%q, %q) = %q, %v; want %q", tt.providerID, tt.node, got, ok, tt.want)
			}
		})
	}

	// CA may hold the placeholder of an instance that has since received
	// its cloud id (it listed the group just before): still resolvable.
	upd := testInstance("web", "i-2", stateCreating)
	upd.ProviderID = "tencentcloud:///ap-guangzhou-3/ins-bbb"
	m.PutInstance("web.i-2", 4, upd)
	for _, pid := range []string{"nodesmith:///web/i-2", "tencentcloud:///ap-guangzhou-3/ins-bbb"} {
		if g, ok := m.GroupForNode(pid, ""); !ok || g.Record.ID != "web" {
			t.Errorf("after the cloud id arrived, %q resolves to %q, %v", pid, g.Record.ID, ok)
		}
	}

	// An instance whose group record is gone is unmanaged.
	m.DeleteGroup("gpu", 3)
	if _, ok := m.GroupForNode("nodesmith:///gpu/i-3", ""); ok {
		t.Error("instance of a deleted group still resolves")
	}
}

func TestReadModelNodeNamePrefersLiveInstances(t *testing.T) {
	m := syncedModel()
	m.PutGroup("old", 1, testGroup("old", 0, 10, 0))
	m.PutGroup("new", 2, testGroup("new", 0, 10, 1))
	gone := testInstance("old", "i-1", stateDeleted)
	gone.NodeName, gone.ProviderID = "10.0.0.7", "tencentcloud:///ap-guangzhou/ins-old"
	m.PutInstance("old.i-1", 1, gone)

	// A DELETED record's name may belong to an unrelated node now.
	if _, ok := m.GroupForNode("", "10.0.0.7"); ok {
		t.Fatal("a DELETED instance's node name resolved")
	}
	// Nor its providerID: the VM is gone, a Node still carrying the id is
	// not ours any more (CA must see it as unmanaged).
	for _, pid := range []string{"tencentcloud:///ap-guangzhou/ins-old", "nodesmith:///old/i-1"} {
		if g, ok := m.GroupForNode(pid, pid); ok {
			t.Fatalf("a DELETED instance's providerID %q resolved to %q", pid, g.Record.ID)
		}
	}
	if _, ok := m.InstanceForNode("tencentcloud:///ap-guangzhou/ins-old", ""); ok {
		t.Fatal("InstanceForNode resolved a DELETED instance")
	}
	// The record stays readable by id and in its group's listing (history).
	if v, ok := m.Instance("i-1"); !ok || v.State() != domain.StateDeleted {
		t.Fatal("a DELETED instance is no longer readable by id")
	}
	if n := len(m.GroupInstances("old", nil)); n != 1 {
		t.Fatalf("group lists %d instances, want the DELETED one", n)
	}

	reuse := testInstance("new", "i-2", stateRunning)
	reuse.NodeName = "10.0.0.7"
	m.PutInstance("new.i-2", 2, reuse)
	if g, _ := m.GroupForNode("", "10.0.0.7"); g.Record.ID != "new" {
		t.Fatalf("reused node name resolves to %q, want new", g.Record.ID)
	}
	m.DeleteInstance("new.i-2", 3)
	if _, ok := m.GroupForNode("", "10.0.0.7"); ok {
		t.Fatal("purged instance still resolves by node name")
	}
	if got := len(m.GroupInstances("new", nil)); got != 0 {
		t.Fatalf("group still lists %d instances after the purge", got)
	}
}

func TestReadModelRevisionsAndStaleValues(t *testing.T) {
	m := NewReadModel()
	m.PutGroup("g", 5, testGroup("g", 0, 3, 2))
	m.PutGroup("g", 4, testGroup("g", 0, 3, 1)) // replayed older value
	if g, _ := m.Group("g"); g.Record.TargetSize != 2 || g.Revision != 5 {
		t.Fatalf("stale value applied: target %d rev %d", g.Record.TargetSize, g.Revision)
	}
	m.Skip(BucketGroups, 9)
	m.PutInstance("g.i", 3, testInstance("g", "i", statePending))
	if gr, ir := m.Revisions(); gr != 9 || ir != 3 {
		t.Fatalf("revisions = %d, %d; want 9, 3", gr, ir)
	}
	if m.Synced() {
		t.Fatal("synced before the markers")
	}
}

func TestReadModelResyncDropsKeysNotSeen(t *testing.T) {
	m := NewReadModel()
	m.PutGroup("a", 1, testGroup("a", 0, 1, 0))
	m.PutGroup("b", 2, testGroup("b", 0, 1, 0))
	m.PutInstance("a.i-1", 1, testInstance("a", "i-1", stateRunning))
	m.PutInstance("a.i-2", 2, testInstance("a", "i-2", stateRunning))
	m.MarkSynced(BucketGroups, map[string]struct{}{"a": {}})
	m.MarkSynced(BucketInstances, map[string]struct{}{"a.i-2": {}})
	if _, ok := m.Group("b"); ok {
		t.Error("group b survived a resync that did not deliver it")
	}
	if _, ok := m.Instance("i-1"); ok {
		t.Error("instance i-1 survived a resync that did not deliver it")
	}
	if _, ok := m.GroupForNode("nodesmith:///a/i-1", ""); ok {
		t.Error("i-1 still indexed")
	}
	if !m.Synced() {
		t.Error("not synced after both markers")
	}
}

func TestReadModelWaitFor(t *testing.T) {
	m := NewReadModel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	done := make(chan error, 1)
	go func() { done <- m.WaitFor(ctx, 3, 2) }()

	m.MarkSynced(BucketGroups, nil)
	m.MarkSynced(BucketInstances, nil)
	m.PutGroup("g", 3, testGroup("g", 0, 1, 0))
	select {
	case err := <-done:
		t.Fatalf("WaitFor returned %v before the instances revision", err)
	default:
	}
	m.PutInstance("g.i", 2, testInstance("g", "i", statePending))
	if err := <-done; err != nil {
		t.Fatalf("WaitFor: %v", err)
	}

	// Already reached: immediate.
	if err := m.WaitFor(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	// Never reached: the context decides.
	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancelShort()
	if err := m.WaitFor(short, 100, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitFor for a future revision = %v, want deadline exceeded", err)
	}
}

func TestReadModelFillsIdentityFromKey(t *testing.T) {
	m := syncedModel()
	m.PutGroup("g", 1, &domain.NodeGroup{MaxSize: 2})
	m.PutInstance("g.i-9", 1, &domain.Instance{State: statePending})
	g, ok := m.Group("g")
	if !ok || g.Record.ID != "g" {
		t.Fatalf("group id not filled from key: %+v", g.Record)
	}
	v, ok := m.Instance("i-9")
	if !ok || v.Group() != "g" || v.ReportedID != "nodesmith:///g/i-9" {
		t.Fatalf("instance identity not filled from key: %+v %q", v.Record, v.ReportedID)
	}
}
