package service_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/service"
)

// At-most-once across leaders, through NATS and NATS KV: an operation is
// applied, its answer "lost", and the retry with the same request id
// reaches the next leader (the service restarted: its in-memory request log
// is gone). The group record answers it: the target moves once, and the
// reply's revisions are at least the first attempt's (read-your-writes).
func TestRequestIDAppliedOnceAcrossLeaders(t *testing.T) {
	s := newStack(t, fastConfig(testConfig), service.Deps{})
	incReq := &lifecyclev1.Request{RequestId: "ca-inc-1",
		Op: &lifecyclev1.Request_IncreaseSize{IncreaseSize: &lifecyclev1.IncreaseSize{Group: "workers", Delta: 4}}}
	first := mustOK(t, s.request(incReq))
	s.stop()
	s.start()
	again := mustOK(t, s.request(incReq))
	if g := s.group("workers"); g.TargetSize != 4 {
		t.Fatalf("target after the retry at the next leader = %d, want 4", g.TargetSize)
	}
	if again.GetGroupsRevision() < first.GetGroupsRevision() || again.GetInstancesRevision() < first.GetInstancesRevision() {
		t.Errorf("retry answered revisions %v, below the first attempt's %v", again, first)
	}
	// The id is the group's now: reused for another operation, refused.
	wantCode(t, s.request(&lifecyclev1.Request{RequestId: "ca-inc-1",
		Op: &lifecyclev1.Request_IncreaseSize{IncreaseSize: &lifecyclev1.IncreaseSize{Group: "workers", Delta: 1}}}), codes.InvalidArgument)

	eventually(t, "4 Running", func() bool { return countIn(s.instances("workers"), domain.StateRunning) == 4 })
	var refs []*lifecyclev1.NodeRef
	for _, in := range s.instances("workers")[:2] {
		refs = append(refs, &lifecyclev1.NodeRef{ProviderId: in.ProviderID})
	}
	delReq := &lifecyclev1.Request{RequestId: "ca-del-1",
		Op: &lifecyclev1.Request_DeleteNodes{DeleteNodes: &lifecyclev1.DeleteNodes{Group: "workers", Nodes: refs}}}
	mustOK(t, s.request(delReq))
	s.stop()
	s.start()
	mustOK(t, s.request(delReq))
	if g := s.group("workers"); g.TargetSize != 2 {
		t.Fatalf("target after the DeleteNodes retry at the next leader = %d, want 2", g.TargetSize)
	}
	eventually(t, "2 Deleted and 2 Running", func() bool {
		is := s.instances("workers")
		return countIn(is, domain.StateDeleted) == 2 && countIn(is, domain.StateRunning) == 2
	})
}
