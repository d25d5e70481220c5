package grpcapi

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// A GetOptions answer is reused only for the same defaults: every field of
// the defaults message, in both wire generations, must change the key. A
// field added to NodeGroupAutoscalingOptions fails here until the key
// covers it.
func TestDefaultsKeyCoversEveryField(t *testing.T) {
	base := &pb.NodeGroupAutoscalingOptions{
		ScaleDownUtilizationThreshold: 0.5, ScaleDownGpuUtilizationThreshold: 0.5,
		ScaleDownUnneededDuration: durationpb.New(10 * time.Minute), ScaleDownUnreadyDuration: durationpb.New(20 * time.Minute),
		MaxNodeProvisionDuration: durationpb.New(15 * time.Minute),
	}
	fields := base.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		changed := proto.CloneOf(base)
		m := changed.ProtoReflect()
		switch fd.Kind() {
		case protoreflect.DoubleKind:
			m.Set(fd, protoreflect.ValueOfFloat64(m.Get(fd).Float()+0.25))
		case protoreflect.BoolKind:
			m.Set(fd, protoreflect.ValueOfBool(!m.Get(fd).Bool()))
		case protoreflect.MessageKind:
			// Absent vs present-and-zero, then another value.
			if m.Has(fd) {
				m.Clear(fd)
			} else {
				m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message()))
			}
			if keyOfDefaults(changed) == keyOfDefaults(base) {
				t.Errorf("field %s: present or absent, the same key", fd.Name())
			}
			sub := m.Mutable(fd).Message()
			subFields := sub.Descriptor().Fields()
			for j := range subFields.Len() {
				if sf := subFields.Get(j); sf.Kind() == protoreflect.Int64Kind || sf.Kind() == protoreflect.Int32Kind {
					v := sub.Get(sf).Int() + 7
					if sf.Kind() == protoreflect.Int32Kind {
						sub.Set(sf, protoreflect.ValueOfInt32(int32(v)))
					} else {
						sub.Set(sf, protoreflect.ValueOfInt64(v))
					}
					if keyOfDefaults(changed) == keyOfDefaults(base) {
						t.Errorf("field %s.%s changed, the same key", fd.Name(), sf.Name())
					}
				}
			}
			continue
		default:
			t.Errorf("field %s of kind %v: keyOfDefaults does not know it", fd.Name(), fd.Kind())
			continue
		}
		if keyOfDefaults(changed) == keyOfDefaults(base) {
			t.Errorf("field %s changed, the same key", fd.Name())
		}
	}
	if keyOfDefaults(base) != keyOfDefaults(proto.CloneOf(base)) {
		t.Error("equal defaults, different keys")
	}
}

// Answers of deleted groups are forgotten when another group changes.
func TestAnswersForgetDeletedGroups(t *testing.T) {
	rm := app.NewReadModel()
	rm.PutGroup("a", 1, &domain.NodeGroup{ID: "a", MaxSize: 1})
	rm.PutGroup("b", 2, &domain.NodeGroup{ID: "b", MaxSize: 1})
	s := NewServer(app.NewService(rm, nil, app.Config{}, nil))
	for _, id := range []string{"a", "b"} {
		g, _ := rm.Group(id)
		s.answers.of(g)
	}
	rm.DeleteGroup("a", 3)
	rm.PutGroup("b", 4, &domain.NodeGroup{ID: "b", MaxSize: 2})
	g, _ := rm.Group("b")
	if a := s.answers.of(g); a.forNode.GetNodeGroup().GetMaxSize() != 2 {
		t.Errorf("answers for b's new revision say max %d, want 2", a.forNode.GetNodeGroup().GetMaxSize())
	}
	if _, ok := s.answers.byGroup["a"]; ok || len(s.answers.byGroup) != 1 {
		t.Errorf("answers held for %d groups after a's deletion, want only b's", len(s.answers.byGroup))
	}
}
