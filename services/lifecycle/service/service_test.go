package service_test

import (
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/nodesmith/nodesmith/libs/providerid"

	"google.golang.org/grpc/codes"

	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/service"
)

// The thin path through real JetStream: IncreaseSize creates Pending
// records before replying, the fake cloud creates VMs, the after_created
// hook runs with the documented environment, instances become Running (no
// cluster mode), and DeleteNodes takes one through the before_delete hook
// and termination to Deleted.
func TestScaleUpAndDownEndToEnd(t *testing.T) {
	s := newStack(t, fastConfig(testConfig), service.Deps{})

	r := mustOK(t, s.increase("workers", 3))
	if r.GetGroupsRevision() == 0 || r.GetInstancesRevision() == 0 {
		t.Errorf("reply revisions = %d/%d, want both written", r.GetGroupsRevision(), r.GetInstancesRevision())
	}
	// Read-your-writes: the target and the records are stored before the reply.
	if g := s.group("workers"); g.TargetSize != 3 {
		t.Errorf("target after reply = %d, want 3", g.TargetSize)
	}
	if n := len(s.instances("workers")); n != 3 {
		t.Errorf("records after reply = %d, want 3", n)
	}
	for _, in := range s.instances("workers") {
		// The placeholder until the cloud id is known (the dispatcher may
		// already have moved on), never empty.
		if _, id, ok := providerid.ParsePlaceholder(in.ProviderID); (!ok || id != in.ID) && in.CloudID == "" {
			t.Errorf("record without cloud id has providerID %q, want the placeholder", in.ProviderID)
		}
	}

	eventually(t, "3 instances Running", func() bool { return countIn(s.instances("workers"), domain.StateRunning) == 3 })
	running := s.instances("workers")
	for _, in := range running {
		if !strings.HasPrefix(in.ProviderID, "externalgrpc://tencentcloud/dev/ap-guangzhou/ins-") {
			t.Errorf("%s providerID = %q, want the rendered real one", in.ID, in.ProviderID)
		}
		if !domain.ValidInstanceID(in.ID) || !strings.HasPrefix(in.ID, "workers-") {
			t.Errorf("instance id %q is not a DNS-1123 label of the group", in.ID)
		}
	}
	if got := s.workers.Cloud.Calls("create"); got != 1 {
		t.Errorf("create calls = %d, want 1 batch", got)
	}
	runs := s.workers.Hooks.Runs()
	if len(runs) != 3 {
		t.Fatalf("hook runs = %d, want 3", len(runs))
	}
	for _, h := range runs {
		env := h.GetEnv()
		for _, k := range []string{"NODE_NAME", "NODE_IP", "PROVIDER_ID", "INSTANCE_ID", "NODE_GROUP", "API_SERVER"} {
			if env[k] == "" {
				t.Errorf("hook env of %s lacks %s: %v", h.GetInstanceId(), k, env)
			}
		}
		if !strings.HasPrefix(env["API_SERVER"], "sealed:v1:") || strings.Contains(env["API_SERVER"], "10.0.0.1") {
			t.Errorf("the config file's hook env value API_SERVER travels unsealed: %q", env["API_SERVER"])
		}
		if h.GetHost() == "" || h.GetHost() != env["NODE_IP"] {
			t.Errorf("hook host %q, NODE_IP %q", h.GetHost(), env["NODE_IP"])
		}
		if !strings.Contains(h.GetScript(), "kubeadm join") {
			t.Errorf("hook script = %q", h.GetScript())
		}
	}

	// Out of range and nothing unregistered to cancel.
	wantCode(t, s.increase("workers", 18), codes.OutOfRange)
	wantCode(t, s.decrease("workers", -1), codes.FailedPrecondition)
	wantCode(t, s.increase("nope", 1), codes.NotFound)
	wantCode(t, s.increase("workers", 0), codes.InvalidArgument)

	victim := running[0]
	mustOK(t, s.deleteNodes("workers", victim.ProviderID))
	if g := s.group("workers"); g.TargetSize != 2 {
		t.Errorf("target after DeleteNodes = %d, want 2", g.TargetSize)
	}
	// CA repeats DeleteNodes: accepted, the target is not lowered again.
	mustOK(t, s.deleteNodes("workers", victim.ProviderID))
	if g := s.group("workers"); g.TargetSize != 2 {
		t.Errorf("target after a repeated DeleteNodes = %d, want 2", g.TargetSize)
	}
	eventually(t, "victim Deleted", func() bool {
		for _, in := range s.instances("workers") {
			if in.ID == victim.ID {
				return in.State == domain.StateDeleted
			}
		}
		return false
	})
	if n := len(s.workers.Cloud.Running()); n != 2 {
		t.Errorf("VMs left = %d, want 2", n)
	}
	var beforeDelete int
	for _, h := range s.workers.Hooks.Runs() {
		if h.GetHook().String() == "HOOK_KIND_BEFORE_DELETE" {
			beforeDelete++
			if h.GetInstanceId() != victim.ID {
				t.Errorf("before_delete ran on %s, want %s", h.GetInstanceId(), victim.ID)
			}
		}
	}
	if beforeDelete != 1 {
		t.Errorf("before_delete runs = %d, want 1", beforeDelete)
	}
	if n := countIn(s.instances("workers"), domain.StateRunning); n != 2 {
		t.Errorf("running = %d, want 2: %s", n, summary(s.instances("workers")))
	}
}

// Concurrent IncreaseSize, DecreaseTargetSize and DeleteNodes calls through
// real NATS and KV never break min <= target <= max and never lose an
// update: the stored target is the sum of the accepted deltas.
func TestConcurrentOperationsThroughNATS(t *testing.T) {
	cfg := fastConfig(strings.Replace(testConfig, "minSize: 0", "minSize: 2", 1))
	s := newStack(t, cfg, service.Deps{})
	if g := s.group("workers"); g.TargetSize != 2 {
		t.Fatalf("initial target %d", g.TargetSize)
	}
	var (
		mu       sync.Mutex
		accepted = 2
		wg       sync.WaitGroup
	)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range 25 {
				var (
					reply *lifecyclev1.Reply
					delta int
				)
				switch rng.IntN(3) {
				case 0:
					delta = 1 + rng.IntN(2)
					reply = s.increase("workers", delta)
				case 1:
					delta = -1
					reply = s.decrease("workers", delta)
				default:
					var live []domain.Instance
					for _, in := range s.instances("workers") {
						if in.Live() {
							live = append(live, in)
						}
					}
					if len(live) == 0 {
						continue
					}
					reply = s.deleteNodes("workers", live[rng.IntN(len(live))].ProviderID)
					if reply.GetGroupsRevision() != 0 {
						delta = -1
					}
				}
				mu.Lock()
				if reply.GetError() == nil {
					accepted += delta
				} else if c := codes.Code(reply.GetError().GetCode()); c != codes.OutOfRange && c != codes.FailedPrecondition {
					t.Errorf("unexpected error %s: %s", c, reply.GetError().GetMessage())
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	g := s.group("workers")
	if g.TargetSize != accepted || g.TargetSize < g.MinSize || g.TargetSize > g.MaxSize {
		t.Errorf("target %d, want %d within [%d, %d]", g.TargetSize, accepted, g.MinSize, g.MaxSize)
	}
	eventually(t, "live instances == target, all Running", func() bool {
		live, running := 0, 0
		for _, in := range s.instances("workers") {
			if in.Live() {
				live++
				if in.State == domain.StateRunning {
					running++
				}
			}
		}
		return live == accepted && running == live
	})
}

// At-most-once operations through NATS: the same IncreaseSize request id
// sent three times raises the target once and is answered with the same
// revisions; different ids raise it each time.
func TestRequestIDIncreaseSizeAppliedOnce(t *testing.T) {
	s := newStack(t, fastConfig(testConfig), service.Deps{})
	inc := func(id string) *lifecyclev1.Reply {
		return mustOK(t, s.request(&lifecyclev1.Request{RequestId: id,
			Op: &lifecyclev1.Request_IncreaseSize{IncreaseSize: &lifecyclev1.IncreaseSize{Group: "workers", Delta: 2}}}))
	}
	first := inc("ca-req-1")
	for range 2 {
		if r := inc("ca-req-1"); r.GetGroupsRevision() != first.GetGroupsRevision() || r.GetInstancesRevision() != first.GetInstancesRevision() {
			t.Errorf("repeat answered %v, want the first reply %v", r, first)
		}
	}
	if g := s.group("workers"); g.TargetSize != 2 {
		t.Fatalf("target after one request id sent 3 times = %d, want 2", g.TargetSize)
	}
	inc("ca-req-2")
	inc("ca-req-3")
	if g := s.group("workers"); g.TargetSize != 6 {
		t.Errorf("target after three request ids = %d, want 6", g.TargetSize)
	}
	// The same id for another operation is refused.
	wantCode(t, s.request(&lifecyclev1.Request{RequestId: "ca-req-1",
		Op: &lifecyclev1.Request_IncreaseSize{IncreaseSize: &lifecyclev1.IncreaseSize{Group: "workers", Delta: 1}}}), codes.InvalidArgument)
}
