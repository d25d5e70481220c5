package service_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	hookv1 "github.com/nodesmith/nodesmith/proto/nodesmith/hook/v1"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/memory"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/fakeworkers"
	"github.com/nodesmith/nodesmith/services/lifecycle/service"
)

// The service is restarted (same KV, same streams) while a scale-up and a
// scale-down are in flight, at each transition boundary; the workers keep
// running. At the end nothing is lost, nothing is stuck, and no VM was
// created twice for one instance or left behind.
func TestRestartsAtTransitionBoundaries(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts the service many times")
	}
	for round := range 3 {
		t.Run(fmt.Sprintf("round %d", round), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(round), 42))
			cluster := memory.NewCluster()
			s := newStack(t, fastConfig(testConfig), service.Deps{Cluster: cluster})
			s.workers.Cloud.Set(func(c *fakeworkers.Cloud) { c.Latency = 30 * time.Millisecond })
			s.workers.Hooks.Set(func(h *fakeworkers.Hooks) {
				h.Latency = 30 * time.Millisecond
				h.OnSuccess = func(r *hookv1.RunHook) {
					if r.GetHook() == hookv1.HookKind_HOOK_KIND_AFTER_CREATED {
						cluster.Put(service.Node{Name: r.GetEnv()["NODE_NAME"], ProviderID: r.GetEnv()["PROVIDER_ID"], Ready: true})
					}
				}
			})
			restartAt := func(st domain.State) {
				t.Helper()
				eventually(t, "an instance reaching "+st.String(), func() bool {
					for _, in := range s.instances("workers") {
						if in.State >= st {
							return true
						}
					}
					return false
				})
				time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
				s.stop()
				s.start()
			}

			mustOK(t, s.increase("workers", 6))
			for _, st := range []domain.State{domain.StateCreating, domain.StateCreated, domain.StateJoined, domain.StateRunning} {
				restartAt(st)
			}
			eventually(t, "6 Running", func() bool { return countIn(s.instances("workers"), domain.StateRunning) == 6 })

			var victims []string
			for _, in := range s.instances("workers")[:3] {
				victims = append(victims, in.ProviderID)
			}
			mustOK(t, s.deleteNodes("workers", victims...))
			for _, st := range []domain.State{domain.StatePendingDeletion, domain.StateDeleting, domain.StateDeleted} {
				restartAt(st)
			}
			eventually(t, "3 Deleted and 3 Running", func() bool {
				is := s.instances("workers")
				return countIn(is, domain.StateDeleted) == 3 && countIn(is, domain.StateRunning) == 3
			})
			checkNoLeaksOrDuplicates(t, s, cluster)
		})
	}
}

func checkNoLeaksOrDuplicates(t *testing.T, s *stack, cluster *memory.Cluster) {
	t.Helper()
	is := s.instances("workers")
	if g := s.group("workers"); g.TargetSize != countIn(is, domain.StateRunning) {
		t.Errorf("target %d, running %d", g.TargetSize, countIn(is, domain.StateRunning))
	}
	live := map[string]domain.Instance{}
	for _, in := range is {
		if in.InFlight || !in.Deadline.IsZero() && in.State != domain.StateRunning {
			t.Errorf("%s left in flight: %s", in.ID, in.State)
		}
		if in.Live() {
			live[in.ID] = in
		}
	}
	perInstance := map[string]int{}
	for _, vm := range s.workers.Cloud.VMs() {
		perInstance[vm.InstanceID]++
	}
	for id, n := range perInstance {
		if n != 1 {
			t.Errorf("instance %s got %d VMs: a duplicate create was not absorbed", id, n)
		}
	}
	running := s.workers.Cloud.Running()
	if len(running) != len(live) {
		t.Errorf("%d VMs exist for %d live instances", len(running), len(live))
	}
	for _, vm := range running {
		if _, ok := live[vm.InstanceID]; !ok {
			t.Errorf("VM %s of %s leaked", vm.CloudID, vm.InstanceID)
		}
	}
	for _, in := range is {
		_, exists := cluster.Get(in.ID)
		if in.State == domain.StateDeleted && exists {
			t.Errorf("node %s of a deleted instance remains", in.ID)
		}
		if in.Live() && !exists {
			t.Errorf("node %s of a live instance is missing", in.ID)
		}
	}
	if deleted := cluster.Deleted(); len(deleted) != 3 || slices.ContainsFunc(deleted, func(n string) bool { _, ok := live[n]; return ok }) {
		t.Errorf("deleted nodes %v", deleted)
	}
}
