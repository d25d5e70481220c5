package protoconv_test

import (
	"reflect"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/proto"

	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/protoconv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// Records written by other tools (or older versions) may leave any message
// unset: mapping must not panic.
func TestMappingToleratesUnsetMessages(t *testing.T) {
	g := protoconv.GroupFromProto(&statev1.NodeGroup{Id: "g"})
	if g.ID != "g" || g.Hooks.AfterCreated != nil || g.Autoscaling.ZeroOrMaxNodeScaling != nil {
		t.Errorf("group %+v", g)
	}
	in := protoconv.InstanceFromProto(&statev1.Instance{Id: "i"})
	if in.ID != "i" || in.LastError != nil || !in.CreatedAt.IsZero() {
		t.Errorf("instance %+v", in)
	}
	// And a round trip through the wire keeps an empty group empty.
	b, err := proto.Marshal(protoconv.GroupToProto(g))
	if err != nil {
		t.Fatal(err)
	}
	var p statev1.NodeGroup
	if err := proto.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if got := protoconv.GroupFromProto(&p); got.ID != "g" {
		t.Errorf("round trip %+v", got)
	}
}

// Adopted instances were marked with batch id "adopted" before the adopted
// field: such records still read as adopted; new ones carry the field only.
func TestAdoptedMarker(t *testing.T) {
	tests := []struct {
		name string
		rec  *statev1.Instance
		want bool
	}{
		{"field", &statev1.Instance{Id: "i", Adopted: true}, true},
		{"legacy batch id", &statev1.Instance{Id: "i", BatchId: "adopted"}, true},
		{"created by a batch", &statev1.Instance{Id: "i", BatchId: "b-1"}, false},
		{"neither", &statev1.Instance{Id: "i"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := protoconv.InstanceFromProto(tc.rec)
			if in.Adopted != tc.want {
				t.Fatalf("adopted = %v, want %v", in.Adopted, tc.want)
			}
			// Written back, the record carries the field.
			if got := protoconv.InstanceToProto(in).GetAdopted(); got != tc.want {
				t.Errorf("written back: adopted = %v, want %v", got, tc.want)
			}
		})
	}
}

// The cache holds every decoded instance: strings instances repeat are
// shared, and the history holds no spare capacity.
func TestDecodedInstancesShareRepeatedStrings(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	decode := func(id string) domain.Instance {
		in := domain.NewInstance(id, "workers", now)
		in.History = append(in.History, domain.NewTransition(domain.StatePending, domain.StateCreating, "create batch formed", now),
			domain.NewTransition(domain.StateCreating, domain.StateCreated, "vm running", now))
		b, err := proto.Marshal(protoconv.InstanceToProto(in))
		if err != nil {
			t.Fatal(err)
		}
		got, err := protoconv.UnmarshalInstance(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, in) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, in)
		}
		return got
	}
	a, b := decode("workers-a"), decode("workers-b")
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	if !same(a.Group, b.Group) {
		t.Error("the group name should be shared")
	}
	for k := range a.History {
		if !same(a.History[k].Reason, b.History[k].Reason) {
			t.Errorf("history reason %q should be shared", a.History[k].Reason)
		}
	}
	if !same(a.NodeName, a.ID) {
		t.Error("a node name equal to the id should be the id's string")
	}
	if cap(a.History) != len(a.History) {
		t.Errorf("history: len %d cap %d", len(a.History), cap(a.History))
	}
}
