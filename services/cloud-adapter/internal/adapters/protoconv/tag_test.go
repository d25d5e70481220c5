package protoconv_test

import (
	"context"
	"testing"

	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/fake"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

func tagged(t *testing.T, evs []published) *cloudv1.InstancesTagged {
	t.Helper()
	if len(evs) != 1 {
		t.Fatalf("%d events, want 1", len(evs))
	}
	ev := evs[0].Event.GetTagged()
	if ev == nil {
		t.Fatalf("event %v is not InstancesTagged", evs[0].Event)
	}
	return ev
}

func adoptRefs() []*cloudv1.InstanceRef {
	return []*cloudv1.InstanceRef{
		{InstanceId: "g1-aaaa", Group: "g1", CloudId: "ins-proto1", Adopted: true},
		{InstanceId: "g1-bbbb", Group: "g1", CloudId: "ins-missing", Adopted: true},
		{InstanceId: "g1-cccc", Group: "g1", CloudId: "ins-other", Adopted: true},
	}
}

// The check describes and tags nothing; the tagging tags only the VMs
// that exist and belong to no other cluster, each with its instance id.
func TestTagInstances(t *testing.T) {
	h := newHarness(t, nil)
	pt := ports.Target{Account: "acct", Region: "ap-test"}
	h.cloud.Add(pt, "ins-proto1", "10.0.0.5", map[string]string{"owner": "prototype"})
	h.cloud.Add(pt, "ins-other", "10.0.0.6", map[string]string{domain.TagCluster: "someone-else"})
	ctx := context.Background()

	cmd := &cloudv1.TagInstances{RequestId: "r1", Target: target(), ClusterId: "c1", Instances: adoptRefs(), CheckOnly: true}
	if err := h.svc.Handle(ctx, &cloudv1.Command{Body: &cloudv1.Command_Tag{Tag: cmd}}, first); err != nil {
		t.Fatal(err)
	}
	ev := tagged(t, h.events.All())
	equal(t, "check_only", ev.GetCheckOnly(), true)
	equal(t, "results", len(ev.GetResults()), 3)
	equal(t, "proto1 state", ev.GetResults()[0].GetState(), cloudv1.CloudState_CLOUD_STATE_RUNNING)
	equal(t, "proto1 ip", ev.GetResults()[0].GetPrivateIp(), "10.0.0.5")
	equal(t, "proto1 error", ev.GetResults()[0].GetError() == nil, true)
	equal(t, "missing state", ev.GetResults()[1].GetState(), cloudv1.CloudState_CLOUD_STATE_NOT_FOUND)
	equal(t, "missing code", ev.GetResults()[1].GetError().GetCode(), "InstanceNotFound")
	equal(t, "other code", ev.GetResults()[2].GetError().GetCode(), domain.CodeNotInCluster)
	equal(t, "tag calls after check", len(h.cloud.Calls().Tag), 0)

	h.events.Reset()
	cmd.CheckOnly = false
	for range 2 { // a redelivery tags again, harmlessly
		if err := h.svc.Handle(ctx, &cloudv1.Command{Body: &cloudv1.Command_Tag{Tag: cmd}}, first); err != nil {
			t.Fatal(err)
		}
	}
	ev = tagged(t, h.events.All()) // deduplicated by message id
	equal(t, "proto1 error", ev.GetResults()[0].GetError() == nil, true)
	for _, vm := range h.cloud.VMs() {
		switch vm.CloudID {
		case "ins-proto1":
			equal(t, "cluster tag", vm.Tags[domain.TagCluster], "c1")
			equal(t, "instance tag", vm.Tags[domain.TagInstance], "g1-aaaa")
			equal(t, "group tag", vm.Tags[domain.TagGroup], "g1")
			equal(t, "own tag kept", vm.Tags["owner"], "prototype")
		case "ins-other":
			equal(t, "other cluster kept", vm.Tags[domain.TagCluster], "someone-else")
		}
		equal(t, "state", vm.State, domain.StateRunning)
	}
	equal(t, "creates", len(h.cloud.Calls().Create), 0)
	equal(t, "terminates", len(h.cloud.Calls().Terminate), 0)
}

// A retryable Describe failure is retried through a redelivery, then
// reported as the error of the whole call.
func TestTagInstancesDescribeFailure(t *testing.T) {
	h := newHarness(t, nil)
	h.cloud.FailNext(fake.OpDescribe, ports.NewTransientError("InternalError", "boom"), ports.NewTransientError("InternalError", "boom"))
	cmd := &cloudv1.TagInstances{RequestId: "r2", Target: target(), ClusterId: "c1", Instances: adoptRefs()}
	if err := h.svc.Handle(context.Background(), &cloudv1.Command{Body: &cloudv1.Command_Tag{Tag: cmd}}, first); err == nil {
		t.Fatal("a transient failure on a first delivery was not retried")
	}
	if err := h.svc.Handle(context.Background(), &cloudv1.Command{Body: &cloudv1.Command_Tag{Tag: cmd}}, last); err != nil {
		t.Fatal(err)
	}
	ev := tagged(t, h.events.All())
	equal(t, "error code", ev.GetError().GetCode(), "InternalError")
	equal(t, "tag calls", len(h.cloud.Calls().Tag), 0)
}
