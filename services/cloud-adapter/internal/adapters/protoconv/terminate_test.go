package protoconv_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/fake"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// reported returns the instance ids of the terminated and terminate_failed
// events, and the error codes of the failures.
func reported(evs []published) (terminated, failed, codes []string) {
	for _, p := range evs {
		if e := p.Event.GetTerminated(); e != nil {
			for _, r := range e.GetInstances() {
				terminated = append(terminated, r.GetInstanceId())
			}
		}
		if e := p.Event.GetTerminateFailed(); e != nil {
			for _, r := range e.GetInstances() {
				failed = append(failed, r.GetInstanceId())
			}
			codes = append(codes, e.GetError().GetKind().String()+"/"+e.GetError().GetCode())
		}
	}
	slices.Sort(terminated)
	slices.Sort(failed)
	return terminated, failed, codes
}

func vmState(h *harness, id string) domain.State {
	for _, v := range h.cloud.VMs() {
		if v.CloudID == id {
			return v.State
		}
	}
	return domain.StateNotFound
}

func TestTerminateOnlyThisClustersVMs(t *testing.T) {
	h := newHarness(t, nil)
	vms := createVMs(t, h, 6)
	// i000: ours. i001: another cluster's. i002: untagged (not ours, not
	// adopted). i003: untagged and adopted. i004: another cluster's and
	// adopted. i005: ours, already gone.
	h.cloud.SetTags(vms[1].CloudId, map[string]string{domain.TagCluster: "c2"})
	h.cloud.SetTags(vms[2].CloudId, nil)
	h.cloud.SetTags(vms[3].CloudId, map[string]string{"team": "infra"})
	vms[3].Adopted = true
	h.cloud.SetTags(vms[4].CloudId, map[string]string{domain.TagCluster: "c2"})
	vms[4].Adopted = true
	h.cloud.Remove(vms[5].CloudId)

	cmd := &cloudv1.TerminateInstances{Target: target(), ClusterId: "c1", Instances: vms}
	if err := h.svc.Terminate(context.Background(), cmd, first); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	equal(t, "terminate calls", fmt.Sprint(h.cloud.Calls().Terminate), fmt.Sprint([][]string{{vms[0].CloudId, vms[3].CloudId}}))
	terminated, failed, codes := reported(h.events.All())
	equal(t, "reported terminated", fmt.Sprint(terminated), "[i000 i003 i005]")
	equal(t, "refused", fmt.Sprint(failed), "[i001 i002 i004]")
	equal(t, "refusal", fmt.Sprint(codes), "[ERROR_KIND_INVALID_PARAMETERS/InstanceNotInCluster]")
	for _, i := range []int{1, 2, 4} {
		if st := vmState(h, vms[i].CloudId); st == domain.StateTerminating {
			t.Errorf("VM %s of %s was terminated", vms[i].CloudId, vms[i].InstanceId)
		}
	}

	t.Run("a redelivery refuses again and terminates nothing more", func(t *testing.T) {
		if err := h.svc.Terminate(context.Background(), cmd, first); err != nil {
			t.Fatalf("Terminate: %v", err)
		}
		equal(t, "terminate calls", len(h.cloud.Calls().Terminate), 1)
		equal(t, "duplicates dropped", h.events.Duplicates(), 2)
	})
}

func TestTerminateWithoutClusterIDTerminatesNothing(t *testing.T) {
	h := newHarness(t, nil)
	vms := createVMs(t, h, 2)
	vms = append(vms, &cloudv1.InstanceRef{InstanceId: "never-created", Attempt: 1, Group: "g1"})
	// A command from a lifecycle older than the cluster check.
	if err := h.svc.Terminate(context.Background(), &cloudv1.TerminateInstances{Target: target(), Instances: vms}, first); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	equal(t, "terminate calls", len(h.cloud.Calls().Terminate), 0)
	equal(t, "describe calls", len(h.cloud.Calls().Describe), 0)
	terminated, failed, codes := reported(h.events.All())
	equal(t, "reported terminated", fmt.Sprint(terminated), "[never-created]")
	equal(t, "refused", fmt.Sprint(failed), "[i000 i001]")
	equal(t, "refusal", fmt.Sprint(codes), "[ERROR_KIND_INVALID_PARAMETERS/InstanceNotInCluster]")
}

func TestTerminateDescribeFailure(t *testing.T) {
	throttled := ports.NewThrottledError("RequestLimitExceeded", "")
	for _, tc := range []struct {
		name      string
		delivery  bool
		wantErr   bool
		wantKinds string
	}{
		{name: "retryable: redelivered", wantErr: true, wantKinds: "[]"},
		{name: "retryable on the last delivery: reported", delivery: true, wantKinds: "[terminate_failed]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			vms := createVMs(t, h, 2)
			h.cloud.FailNext(fake.OpDescribe, throttled)
			d := first
			if tc.delivery {
				d = last
			}
			err := h.svc.Terminate(context.Background(), &cloudv1.TerminateInstances{Target: target(), ClusterId: "c1", Instances: vms}, d)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Terminate = %v, want error %v", err, tc.wantErr)
			}
			equal(t, "terminate calls", len(h.cloud.Calls().Terminate), 0)
			equal(t, "events", fmt.Sprint(kinds(h.events.All())), tc.wantKinds)
		})
	}
}
