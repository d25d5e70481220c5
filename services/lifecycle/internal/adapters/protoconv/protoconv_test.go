package protoconv_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/protoconv"
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
