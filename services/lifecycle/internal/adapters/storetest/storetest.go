// Package storetest is the contract every ports.Store implementation must
// meet. The in-memory fake and the NATS KV adapter both run it, so the fake
// used by unit tests cannot drift from the real store.
package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// Run runs the contract against stores made by newStore (each subtest gets
// a fresh, empty store).
func Run(t *testing.T, newStore func(t *testing.T) ports.Store) {
	t.Run("group round trip keeps every field", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		g := SampleGroup("workers")
		rev, err := s.CreateGroup(ctx, g)
		if err != nil || rev == 0 {
			t.Fatalf("CreateGroup = %d, %v", rev, err)
		}
		got, err := s.GetGroup(ctx, "workers")
		if err != nil {
			t.Fatalf("GetGroup: %v", err)
		}
		if got.Revision != rev {
			t.Errorf("revision = %d, want %d", got.Revision, rev)
		}
		if !reflect.DeepEqual(got.Group, g) {
			t.Errorf("round trip changed the group:\n got %+v\nwant %+v", got.Group, g)
		}
	})

	t.Run("instance round trip keeps every field", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		in := SampleInstance("workers", "workers-abcdefghij")
		rev, err := s.CreateInstance(ctx, in)
		if err != nil || rev == 0 {
			t.Fatalf("CreateInstance = %d, %v", rev, err)
		}
		got, err := s.GetInstance(ctx, "workers", in.ID)
		if err != nil {
			t.Fatalf("GetInstance: %v", err)
		}
		if got.Revision != rev || !reflect.DeepEqual(got.Instance, in) {
			t.Errorf("round trip: got rev %d %+v\nwant rev %d %+v", got.Revision, got.Instance, rev, in)
		}
	})

	t.Run("create of an existing key conflicts", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		mustCreateGroup(t, s, SampleGroup("a"))
		if _, err := s.CreateGroup(ctx, SampleGroup("a")); !errors.Is(err, ports.ErrConflict) {
			t.Errorf("second CreateGroup err = %v, want ErrConflict", err)
		}
		in := SampleInstance("a", "a-1111111111")
		if _, err := s.CreateInstance(ctx, in); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateInstance(ctx, in); !errors.Is(err, ports.ErrConflict) {
			t.Errorf("second CreateInstance err = %v, want ErrConflict", err)
		}
	})

	t.Run("update needs the current revision", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		in := SampleInstance("a", "a-2222222222")
		r1, err := s.CreateInstance(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		in.State = domain.StateCreating
		r2, err := s.UpdateInstance(ctx, in, r1)
		if err != nil {
			t.Fatalf("update at current revision: %v", err)
		}
		if r2 <= r1 {
			t.Errorf("revision did not increase: %d -> %d", r1, r2)
		}
		in.State = domain.StateCreated
		if _, err := s.UpdateInstance(ctx, in, r1); !errors.Is(err, ports.ErrConflict) {
			t.Errorf("update at stale revision err = %v, want ErrConflict", err)
		}
		got, _ := s.GetInstance(ctx, "a", in.ID)
		if got.Instance.State != domain.StateCreating {
			t.Errorf("a failed update changed the record: state %s", got.Instance.State)
		}
		missing := SampleInstance("a", "a-3333333333")
		if _, err := s.UpdateInstance(ctx, missing, 1); !errors.Is(err, ports.ErrConflict) {
			t.Errorf("update of a missing key err = %v, want ErrConflict", err)
		}

		g := SampleGroup("g")
		gr := mustCreateGroup(t, s, g)
		g.TargetSize = 3
		if _, err := s.UpdateGroup(ctx, g, gr); err != nil {
			t.Fatalf("UpdateGroup: %v", err)
		}
		if _, err := s.UpdateGroup(ctx, g, gr); !errors.Is(err, ports.ErrConflict) {
			t.Errorf("UpdateGroup at stale revision err = %v, want ErrConflict", err)
		}
	})

	t.Run("get of a missing key is not found", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		if _, err := s.GetGroup(ctx, "nope"); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("GetGroup err = %v, want ErrNotFound", err)
		}
		if _, err := s.GetInstance(ctx, "g", "nope"); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("GetInstance err = %v, want ErrNotFound", err)
		}
	})

	t.Run("delete needs the current revision and the key can be created again", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		gr := mustCreateGroup(t, s, SampleGroup("d"))
		if _, err := s.DeleteGroup(ctx, "d", gr+100); !errors.Is(err, ports.ErrConflict) {
			t.Errorf("DeleteGroup at wrong revision err = %v, want ErrConflict", err)
		}
		drev, err := s.DeleteGroup(ctx, "d", gr)
		if err != nil {
			t.Fatalf("DeleteGroup: %v", err)
		}
		if drev <= gr {
			t.Errorf("delete revision %d not after %d", drev, gr)
		}
		if _, err := s.GetGroup(ctx, "d"); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("GetGroup after delete err = %v, want ErrNotFound", err)
		}
		if gs, _ := s.ListGroups(ctx); len(gs) != 0 {
			t.Errorf("ListGroups after delete = %d groups", len(gs))
		}
		mustCreateGroup(t, s, SampleGroup("d"))

		in := SampleInstance("d", "d-4444444444")
		ir, err := s.CreateInstance(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.DeleteInstance(ctx, "d", in.ID, ir); err != nil {
			t.Fatalf("DeleteInstance: %v", err)
		}
		if _, err := s.GetInstance(ctx, "d", in.ID); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("GetInstance after delete err = %v, want ErrNotFound", err)
		}
	})

	t.Run("list returns every record with its revision", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		if is, err := s.ListInstances(ctx); err != nil || len(is) != 0 {
			t.Fatalf("ListInstances on empty store = %v, %v", is, err)
		}
		want := map[string]uint64{}
		for _, id := range []string{"l-aaaaaaaaaa", "l-bbbbbbbbbb", "l-cccccccccc"} {
			rev, err := s.CreateInstance(ctx, SampleInstance("l", id))
			if err != nil {
				t.Fatal(err)
			}
			want[id] = rev
		}
		is, err := s.ListInstances(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]uint64{}
		for _, v := range is {
			got[v.Instance.ID] = v.Revision
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ListInstances = %v, want %v", got, want)
		}
		mustCreateGroup(t, s, SampleGroup("x"))
		mustCreateGroup(t, s, SampleGroup("y"))
		gs, err := s.ListGroups(ctx)
		if err != nil || len(gs) != 2 {
			t.Errorf("ListGroups = %d groups, %v; want 2", len(gs), err)
		}
	})
}

func mustCreateGroup(t *testing.T, s ports.Store, g domain.NodeGroup) uint64 {
	t.Helper()
	rev, err := s.CreateGroup(context.Background(), g)
	if err != nil {
		t.Fatalf("CreateGroup %s: %v", g.ID, err)
	}
	return rev
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)

// SampleGroup returns a group with every field set.
func SampleGroup(id string) domain.NodeGroup {
	half, yes := 0.5, true
	return domain.NodeGroup{
		ID: id, MinSize: 1, MaxSize: 10, TargetSize: 2,
		Template: domain.InstanceTemplate{
			Name: "small", Provider: cloudspec.Tencent, Account: "dev", Region: "ap-guangzhou", Zone: "ap-guangzhou-3",
			ParametersJSON: `{"InstanceType":"S5.MEDIUM4"}`, ProviderIDTemplate: "tc://{{.CloudID}}",
			HourlyPrice: 0.25, InstanceType: "S5.MEDIUM4", Arch: "amd64", OS: "linux",
			HookEnv: map[string]string{"K": "V"}, SSHPort: 2222,
			CapacityType: cloudspec.CapacitySpot, MaxPrice: "0.08", OfferingStrategy: cloudspec.StrategyBalanced,
			Offerings: []cloudspec.Offering{
				{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4"},
				{Zone: "ap-guangzhou-4", SubnetID: "subnet-4", InstanceType: "S5.MEDIUM4", CapacityType: cloudspec.CapacityOnDemand},
			},
		},
		NodeTemplate: domain.NodeTemplate{
			Labels:      map[string]string{"role": "worker"},
			Annotations: map[string]string{"a": "b"},
			Taints:      []domain.Taint{{Key: "dedicated", Value: "w", Effect: "NoSchedule"}},
			Capacity:    map[string]string{"cpu": "4"},
			Allocatable: map[string]string{"cpu": "3800m"},
		},
		Autoscaling: domain.AutoscalingOptions{
			ScaleDownUtilizationThreshold: &half, ScaleDownGPUUtilizationThreshold: &half,
			ScaleDownUnneeded: 10 * time.Minute, ScaleDownUnready: 20 * time.Minute, MaxNodeProvision: 15 * time.Minute,
			ZeroOrMaxNodeScaling: &yes, IgnoreDaemonSetsUtilization: &yes,
		},
		Hooks: domain.Hooks{
			AfterCreated: &domain.HookSpec{Name: "join", Script: "kubeadm join", Timeout: time.Minute, Env: map[string]string{"X": "1"}},
			BeforeDelete: &domain.HookSpec{Name: "drain", Script: "drain", OnFailure: domain.OnFailureBlock},
		},
		Parallelism:   domain.Parallelism{Create: 5, Delete: 2},
		AdoptExisting: true,
		Source:        domain.SourceConfig,
		UpdatedAt:     t0,
		Applied: []domain.AppliedRequest{
			{ID: "req-1", Fingerprint: "fp-1", At: t0},
			{ID: "req-2", Fingerprint: "fp-2", At: t0.Add(time.Second), Release: []string{id + "-aaaaaaaaaa", id + "-bbbbbbbbbb"}, Force: true},
		},
	}
}

// SampleInstance returns an instance with every field set.
func SampleInstance(group, id string) domain.Instance {
	return domain.Instance{
		ID: id, Group: group, State: domain.StateJoined, Attempt: 3, CloudID: "ins-1",
		ProviderID: "tc://ins-1", NodeName: id, PrivateIP: "10.0.0.1", ClientToken: "tok", BatchID: "b1",
		LastError:      &domain.ErrorInfo{Code: "X", Message: "m", Class: 99, Retryable: true, At: t0},
		CreationFailed: true, CreatedAt: t0, StateSince: t0.Add(time.Second), Deadline: t0.Add(time.Hour),
		NextRetryAt: t0.Add(time.Minute), Retries: 2,
		History:    []domain.Transition{{From: domain.StatePending, To: domain.StateCreating, Reason: "r", At: t0}},
		SSHHostKey: "ssh-ed25519 AAAA", HookOutputTail: "ok", InFlight: true, Released: true,
		Adopted: true, Zone: "ap-guangzhou-4", InstanceType: "S5.MEDIUM4", CapacityType: cloudspec.CapacitySpot,
	}
}
