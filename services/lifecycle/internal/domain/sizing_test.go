package domain_test

import (
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/libs/providerid"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

func sized(minSize, target, maxSize int) domain.NodeGroup {
	return domain.NodeGroup{ID: "g", MinSize: minSize, TargetSize: target, MaxSize: maxSize}
}

// code names the error's code, or is "" for no error.
func code(err error) string {
	if err == nil {
		return ""
	}
	return domain.CodeOf(err).String()
}

func TestSizeChecks(t *testing.T) {
	g := sized(1, 3, 5)
	tests := []struct {
		name string
		err  error
		want string // "" for no error
	}{
		{"increase within max", g.CheckIncrease(2), ""},
		{"increase beyond max", g.CheckIncrease(3), contract.CodeOutOfRange.String()},
		{"increase by zero", g.CheckIncrease(0), contract.CodeInvalidArgument.String()},
		{"target at min", g.CheckTarget(1), ""},
		{"target at max", g.CheckTarget(5), ""},
		{"target below min", g.CheckTarget(0), contract.CodeOutOfRange.String()},
		{"target above max", g.CheckTarget(6), contract.CodeOutOfRange.String()},
		{"decrease to min", g.CheckDecrease(1, 1, 2), ""},
		{"decrease below min", g.CheckDecrease(0, 0, 3), contract.CodeOutOfRange.String()},
		{"decrease below registered nodes", g.CheckDecrease(1, 2, 1), contract.CodeFailedPrecondition.String()},
	}
	for _, tc := range tests {
		if got := code(tc.err); got != tc.want {
			t.Errorf("%s: code %v (%v), want %v", tc.name, got, tc.err, tc.want)
		}
	}
}

func TestDeleteDecrease(t *testing.T) {
	ok, failed := domain.Instance{}, domain.Instance{CreationFailed: true}
	tests := []struct {
		name    string
		g       domain.NodeGroup
		release []domain.Instance
		want    int
		wantErr bool
	}{
		{"room for all", sized(0, 3, 5), []domain.Instance{ok, ok}, 2, false},
		{"below min refused", sized(2, 3, 5), []domain.Instance{ok, ok}, 0, true},
		{"failed instances replaced at min", sized(2, 2, 5), []domain.Instance{failed, failed}, 0, false},
		{"failed instances fill the room left", sized(1, 3, 5), []domain.Instance{ok, failed, failed}, 2, false},
	}
	for _, tc := range tests {
		got, err := tc.g.DeleteDecrease(tc.release)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%s: %d, %v; want %d, error %v", tc.name, got, err, tc.want, tc.wantErr)
		}
		if err != nil && domain.CodeOf(err) != contract.CodeOutOfRange {
			t.Errorf("%s: code %v, want OutOfRange", tc.name, domain.CodeOf(err))
		}
	}
}

func TestSortForCancel(t *testing.T) {
	at := func(id string, s domain.State, failed bool, age time.Duration) domain.Instance {
		return domain.Instance{ID: id, State: s, CreationFailed: failed, CreatedAt: t0.Add(-age)}
	}
	ins := []domain.Instance{
		at("running", domain.StateRunning, false, time.Hour),
		at("creating", domain.StateCreating, false, time.Hour),
		at("failed", domain.StateCreating, true, time.Hour),
		at("pending-old", domain.StatePending, false, 2*time.Hour),
		at("pending-new", domain.StatePending, false, time.Minute),
		at("joined", domain.StateJoined, false, time.Hour),
	}
	domain.SortForCancel(ins)
	want := []string{"pending-new", "pending-old", "failed", "creating", "joined", "running"}
	for i, in := range ins {
		if in.ID != want[i] {
			t.Fatalf("order %d: %s, want %s (all: %v)", i, in.ID, want[i], ins)
		}
	}
}

// finder is a map-backed domain.InstanceFinder.
type finder struct {
	byProvider map[string]string
	insts      map[string]domain.Instance
}

func (f finder) ByProviderID(p string) (domain.Instance, bool) {
	in, ok := f.insts[f.byProvider[p]]
	return in, ok
}

func (f finder) ByID(id string) (domain.Instance, bool) {
	in, ok := f.insts[id]
	return in, ok
}

func (f finder) ByNodeName(name string) (domain.Instance, bool) {
	for _, in := range f.insts {
		if in.NodeName == name {
			return in, true
		}
	}
	return domain.Instance{}, false
}

func TestResolveNode(t *testing.T) {
	f := finder{
		byProvider: map[string]string{"tencentcloud:///ap-1/ins-1": "g-a"},
		insts: map[string]domain.Instance{
			"g-a": {ID: "g-a", ProviderID: "tencentcloud:///ap-1/ins-1", NodeName: "node-a"},
			"g-b": {ID: "g-b", NodeName: "node-b"},
		},
	}
	tests := []struct {
		name string
		ref  domain.NodeRef
		want string // "" for not found
	}{
		{"real providerID", domain.NodeRef{ProviderID: "tencentcloud:///ap-1/ins-1"}, "g-a"},
		{"placeholder's instance id", domain.NodeRef{ProviderID: providerid.Placeholder("g", "g-b")}, "g-b"},
		{"instance id as name", domain.NodeRef{Name: "g-b"}, "g-b"},
		{"instance id as providerID", domain.NodeRef{ProviderID: "g-a"}, "g-a"},
		{"node name", domain.NodeRef{Name: "node-b", ProviderID: "unknown://x"}, "g-b"},
		{"unknown", domain.NodeRef{ProviderID: "unknown://x", Name: "nobody"}, ""},
		{"empty", domain.NodeRef{}, ""},
	}
	for _, tc := range tests {
		in, ok := domain.ResolveNode(tc.ref, f)
		if ok != (tc.want != "") || in.ID != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, in.ID, ok, tc.want)
		}
	}
}
