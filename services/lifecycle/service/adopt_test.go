package service_test

import (
	"testing"
	"time"

	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	hookv1 "github.com/nodesmith/nodesmith/proto/nodesmith/hook/v1"
	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/fakeworkers"
	"github.com/nodesmith/nodesmith/services/lifecycle/service"
)

// The explicit adoption through the real request subject, command and
// event streams: the prototype's VMs (no nodesmith tag) become Running
// instances and are tagged, a second run adopts nothing, nothing is
// created or terminated, and the adopted VMs scale down cleanly (the
// before_delete hook runs, the VM is terminated).
func TestAdoptVMsThroughTheStreams(t *testing.T) {
	cfg := fastConfig(testConfig)
	cfg.ReconcileInterval = 50 * time.Millisecond
	s := newStack(t, cfg, service.Deps{})
	pid := func(id string) string { return "externalgrpc://tencentcloud/dev/ap-guangzhou/" + id }
	for _, id := range []string{"ins-proto1", "ins-proto2"} {
		s.workers.Cloud.AddVM(fakeworkers.VM{CloudID: id, IP: "10.7.0.1", State: cloudv1.CloudState_CLOUD_STATE_RUNNING, CreatedAt: time.Now().Add(-time.Hour)})
	}
	adopt := func(dry bool, ids ...string) *lifecyclev1.Reply {
		op := &lifecyclev1.AdoptVMs{Group: "workers", DryRun: dry}
		for _, id := range ids {
			op.Vms = append(op.Vms, &lifecyclev1.AdoptVM{CloudId: id, NodeName: "node-" + id, ProviderId: pid(id)})
		}
		return s.request(&lifecyclev1.Request{Op: &lifecyclev1.Request_AdoptVms{AdoptVms: op}})
	}
	results := func(r *lifecyclev1.Reply) []lifecyclev1.AdoptOutcome_Result {
		var out []lifecyclev1.AdoptOutcome_Result
		for _, o := range r.GetAdopted() {
			out = append(out, o.GetResult())
		}
		return out
	}
	A, R, Al := lifecyclev1.AdoptOutcome_RESULT_ADOPTED, lifecyclev1.AdoptOutcome_RESULT_REFUSED, lifecyclev1.AdoptOutcome_RESULT_ALREADY_ADOPTED

	r := mustOK(t, adopt(true, "ins-proto1", "ins-proto2", "ins-nothere"))
	if got := results(r); len(got) != 3 || got[0] != A || got[1] != A || got[2] != R {
		t.Fatalf("dry run %v", r.GetAdopted())
	}
	if n := len(s.instances("workers")); n != 0 {
		t.Fatalf("the dry run wrote %d records", n)
	}

	r = mustOK(t, adopt(false, "ins-proto1", "ins-proto2"))
	if got := results(r); len(got) != 2 || got[0] != A || got[1] != A {
		t.Fatalf("adoption %v", r.GetAdopted())
	}
	if st := countIn(s.instances("workers"), domain.StateRunning); st != 2 || s.group("workers").TargetSize != 2 {
		t.Fatalf("%d Running, target %d", st, s.group("workers").TargetSize)
	}
	cluster := cfg.ClusterID
	if cluster == "" {
		cluster = service.DefaultLocalClusterID
	}
	for _, vm := range s.workers.Cloud.VMs() {
		if vm.Cluster != cluster || !vm.Tagged || vm.InstanceID == "" {
			t.Errorf("VM %+v not tagged", vm)
		}
	}
	r = mustOK(t, adopt(false, "ins-proto1", "ins-proto2"))
	if got := results(r); len(got) != 2 || got[0] != Al || got[1] != Al {
		t.Fatalf("second adoption %v", r.GetAdopted())
	}
	// Several reconciler passes: the tagged VMs have records, no orphan.
	inv := s.workers.Cloud.Calls("inventory")
	eventually(t, "3 reconciler passes", func() bool { return s.workers.Cloud.Calls("inventory") >= inv+3 })
	if s.workers.Cloud.Calls("create") != 0 || s.workers.Cloud.Calls("terminate") != 0 || len(s.instances("workers")) != 2 {
		t.Fatalf("creates %d, terminates %d, records %d", s.workers.Cloud.Calls("create"), s.workers.Cloud.Calls("terminate"), len(s.instances("workers")))
	}

	// Scale down: the before_delete hook, then the VM terminated.
	mustOK(t, s.deleteNodes("workers", pid("ins-proto1")))
	eventually(t, "ins-proto1 terminated", func() bool {
		for _, vm := range s.workers.Cloud.VMs() {
			if vm.CloudID == "ins-proto1" {
				return vm.State == cloudv1.CloudState_CLOUD_STATE_NOT_FOUND
			}
		}
		return false
	})
	drained := false
	for _, run := range s.workers.Hooks.Runs() {
		drained = drained || (run.GetHook() == hookv1.HookKind_HOOK_KIND_BEFORE_DELETE && run.GetHost() == "10.7.0.1")
	}
	if !drained {
		t.Error("no before_delete hook ran on the adopted VM")
	}
	eventually(t, "one Running, one Deleted", func() bool {
		is := s.instances("workers")
		return countIn(is, domain.StateRunning) == 1 && countIn(is, domain.StateDeleted) == 1
	})
	if s.workers.Cloud.Calls("create") != 0 || s.group("workers").TargetSize != 1 {
		t.Errorf("creates %d, target %d", s.workers.Cloud.Calls("create"), s.group("workers").TargetSize)
	}
}
