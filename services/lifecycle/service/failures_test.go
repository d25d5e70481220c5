package service_test

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	hookv1 "github.com/nodesmith/nodesmith/proto/nodesmith/hook/v1"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/memory"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/fakeworkers"
	"github.com/nodesmith/nodesmith/services/lifecycle/service"
)

// Each way the prototype got stuck forever, recovered by itself.

func TestFailedCloudCallIsRetriedWithANewToken(t *testing.T) {
	s := newStack(t, fastConfig(testConfig), service.Deps{})
	var calls atomic.Int32
	s.workers.Cloud.Set(func(c *fakeworkers.Cloud) {
		c.CreateError = func(*cloudv1.CreateInstances) *cloudv1.CloudError {
			if calls.Add(1) == 1 {
				return &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_TRANSIENT, Code: "InternalError"}
			}
			return nil
		}
	})
	mustOK(t, s.increase("workers", 2))
	eventually(t, "2 Running after a failed create", func() bool { return countIn(s.instances("workers"), domain.StateRunning) == 2 })
	vms := s.workers.Cloud.VMs()
	if len(vms) != 2 {
		t.Errorf("VMs %d, want 2", len(vms))
	}
	if calls.Load() < 2 || vms[0].Token == "" {
		t.Errorf("create calls %d", calls.Load())
	}
	for _, in := range s.instances("workers") {
		if in.LastError != nil || in.Retries != 0 {
			t.Errorf("%s keeps a stale error: %+v", in.ID, in.LastError)
		}
	}
}

func TestCapacityErrorIsReportedUntilCADeletesIt(t *testing.T) {
	s := newStack(t, fastConfig(testConfig), service.Deps{})
	s.workers.Cloud.Set(func(c *fakeworkers.Cloud) {
		c.CreateError = func(*cloudv1.CreateInstances) *cloudv1.CloudError {
			return &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_CAPACITY, Code: "ResourceInsufficient.SpecifiedInstanceType", Message: "sold out"}
		}
	})
	mustOK(t, s.increase("workers", 1))
	eventually(t, "creation failed", func() bool {
		is := s.instances("workers")
		return len(is) == 1 && is[0].CreationFailed
	})
	in := s.instances("workers")[0]
	if in.LastError.Class != domain.ClassOutOfResources || in.LastError.Code != "ResourceInsufficient.SpecifiedInstanceType" || !in.Live() {
		t.Fatalf("failed instance %+v / %+v", in, in.LastError)
	}
	// CA sees it as instanceCreating with an error and deletes it (by the
	// placeholder providerID, as a fake node).
	mustOK(t, s.deleteNodes("workers", in.ProviderID))
	eventually(t, "failed instance Deleted", func() bool { return s.instances("workers")[0].State == domain.StateDeleted })
	if len(s.workers.Cloud.VMs()) != 0 || len(s.workers.Hooks.Runs()) != 0 {
		t.Errorf("VMs %d hooks %d, want none", len(s.workers.Cloud.VMs()), len(s.workers.Hooks.Runs()))
	}
	if g := s.group("workers"); g.TargetSize != 0 {
		t.Errorf("target %d", g.TargetSize)
	}
}

// The create command watches the VMs it created: when its watch fails
// after the cloud ids were published (as when its handler dies), the
// command is redelivered, the same ClientToken returns the same VM, and
// the redelivery watches it to Running.
func TestTransientDescribeErrorsAreRetried(t *testing.T) {
	s := newStack(t, fastConfig(testConfig), service.Deps{})
	var fails atomic.Int32
	fails.Store(1)
	s.workers.Cloud.Set(func(c *fakeworkers.Cloud) {
		// DescribeInstances fails once: the create command is redelivered.
		c.WatchError = func() error {
			if fails.Add(-1) >= 0 {
				return errors.New("DescribeInstances: InternalError")
			}
			return nil
		}
		// And the VM is PENDING at first, as right after RunInstances.
		var seen atomic.Int32
		c.WatchState = func(vm fakeworkers.VM) cloudv1.CloudState {
			if seen.Add(1) == 1 {
				return cloudv1.CloudState_CLOUD_STATE_PENDING
			}
			return vm.State
		}
	})
	mustOK(t, s.increase("workers", 1))
	eventually(t, "Running after describe errors", func() bool { return countIn(s.instances("workers"), domain.StateRunning) == 1 })
	if got := s.workers.Cloud.Calls("watch"); got < 2 {
		t.Errorf("watch deliveries %d, want at least 2", got)
	}
	if got := s.workers.Cloud.Calls("create"); got < 2 {
		t.Errorf("create deliveries %d, want at least 2 (the watch is the create command's)", got)
	}
	if vms := s.workers.Cloud.VMs(); len(vms) != 1 {
		t.Errorf("VMs %+v, want exactly the 1 requested", vms)
	}
}

func TestHookFailureThenRetrySucceeds(t *testing.T) {
	s := newStack(t, fastConfig(testConfig), service.Deps{})
	var n atomic.Int32
	s.workers.Hooks.Set(func(h *fakeworkers.Hooks) {
		h.Result = func(r *hookv1.RunHook) *hookv1.HookResult {
			if n.Add(1) <= 2 {
				return &hookv1.HookResult{Succeeded: false, ExitCode: 1, Error: "kubeadm: connection refused", Retryable: true}
			}
			return nil
		}
	})
	mustOK(t, s.increase("workers", 1))
	eventually(t, "Running after hook failures", func() bool { return countIn(s.instances("workers"), domain.StateRunning) == 1 })
	runs := s.workers.Hooks.Runs()
	if len(runs) != 3 {
		t.Fatalf("hook runs %d, want 3", len(runs))
	}
	if runs[0].GetAttempt() >= runs[1].GetAttempt() || runs[1].GetAttempt() >= runs[2].GetAttempt() {
		t.Errorf("retries must carry new attempts: %d %d %d", runs[0].GetAttempt(), runs[1].GetAttempt(), runs[2].GetAttempt())
	}
}

func TestNodeNeverJoinsIsCleanedUp(t *testing.T) {
	cfg := fastConfig(testConfig)
	cfg.JoinTimeout = 300 * time.Millisecond
	cluster := memory.NewCluster()
	s := newStack(t, cfg, service.Deps{Cluster: cluster})
	mustOK(t, s.increase("workers", 1))
	eventually(t, "join deadline", func() bool {
		is := s.instances("workers")
		return len(is) == 1 && is[0].CreationFailed && is[0].LastError.Code == "JoinTimeout"
	})
	in := s.instances("workers")[0]
	if in.State != domain.StateJoined {
		t.Errorf("state %s", in.State)
	}
	mustOK(t, s.deleteNodes("workers", in.ProviderID))
	eventually(t, "Deleted", func() bool { return s.instances("workers")[0].State == domain.StateDeleted })
	if n := len(s.workers.Cloud.Running()); n != 0 {
		t.Errorf("VMs left %d", n)
	}
}

func TestClusterModeJoinsThroughTheNodeWatcher(t *testing.T) {
	cluster := memory.NewCluster()
	s := newStack(t, fastConfig(testConfig), service.Deps{Cluster: cluster})
	// kubeadm join registers the node; it turns Ready.
	s.workers.Hooks.Set(func(h *fakeworkers.Hooks) {
		h.OnSuccess = func(r *hookv1.RunHook) {
			if r.GetHook() == hookv1.HookKind_HOOK_KIND_AFTER_CREATED {
				cluster.Put(service.Node{Name: r.GetEnv()["NODE_NAME"], ProviderID: r.GetEnv()["PROVIDER_ID"], Ready: true})
			}
		}
	})
	mustOK(t, s.increase("workers", 2))
	eventually(t, "2 Running", func() bool { return countIn(s.instances("workers"), domain.StateRunning) == 2 })
	for _, in := range s.instances("workers") {
		n, ok := cluster.Get(in.ID)
		if !ok || n.Labels["role"] != "worker" || len(n.Taints) != 1 {
			t.Errorf("node %s not labelled: %+v", in.ID, n)
		}
	}
	victim := s.instances("workers")[0]
	mustOK(t, s.deleteNodes("workers", victim.ProviderID))
	eventually(t, "node object deleted", func() bool { return slices.Contains(cluster.Deleted(), victim.ID) })
}

func TestDeletingAVMThatIsAlreadyGone(t *testing.T) {
	s := newStack(t, fastConfig(testConfig), service.Deps{})
	mustOK(t, s.increase("workers", 1))
	eventually(t, "Running", func() bool { return countIn(s.instances("workers"), domain.StateRunning) == 1 })
	in := s.instances("workers")[0]
	s.workers.Cloud.RemoveVM(in.CloudID)
	s.workers.Cloud.Set(func(c *fakeworkers.Cloud) {
		c.TerminateError = func(*cloudv1.InstanceRef) *cloudv1.CloudError {
			return &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_NOT_FOUND, Code: "InvalidInstanceId.NotFound"}
		}
	})
	mustOK(t, s.deleteNodes("workers", in.ProviderID))
	eventually(t, "Deleted", func() bool { return s.instances("workers")[0].State == domain.StateDeleted })
}

func TestDeletingAnInstanceThatNeverGotAnIP(t *testing.T) {
	s := newStack(t, fastConfig(testConfig), service.Deps{})
	s.workers.Cloud.Set(func(c *fakeworkers.Cloud) { c.NoIP = true })
	mustOK(t, s.increase("workers", 1))
	eventually(t, "VM created", func() bool {
		is := s.instances("workers")
		return len(is) == 1 && is[0].CloudID != ""
	})
	in := s.instances("workers")[0]
	mustOK(t, s.deleteNodes("workers", in.ProviderID))
	eventually(t, "Deleted", func() bool { return s.instances("workers")[0].State == domain.StateDeleted })
	if n := len(s.workers.Hooks.Runs()); n != 0 {
		t.Errorf("%d hook commands sent for an instance without an IP", n)
	}
	if n := len(s.workers.Cloud.Running()); n != 0 {
		t.Errorf("VM not terminated")
	}
}

func TestLostCreateIsRepeatedWithTheSameToken(t *testing.T) {
	cfg := fastConfig(testConfig)
	cfg.LaunchTimeout = 500 * time.Millisecond
	s := newStack(t, cfg, service.Deps{})
	var held atomic.Int32
	s.workers.Cloud.Set(func(c *fakeworkers.Cloud) {
		// The cloud adapter never answers the first attempt (it crashed
		// after calling the cloud? no: before), then recovers.
		c.HoldCreate = func(cr *cloudv1.CreateInstances) bool {
			return cr.GetInstances()[0].GetAttempt() == 1 && held.Add(1) < 100
		}
	})
	mustOK(t, s.increase("workers", 2))
	eventually(t, "Running after a lost create", func() bool { return countIn(s.instances("workers"), domain.StateRunning) == 2 })
	vms := s.workers.Cloud.VMs()
	if len(vms) != 2 || vms[0].Token != vms[1].Token {
		t.Errorf("VMs %+v: want 2 from one token", vms)
	}
}
