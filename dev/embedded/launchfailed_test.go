package embedded

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// TestLaunchFailedForCapacityIsOutOfResources: Tencent accepts a launch
// and the VM then ends LAUNCH_FAILED because the zone ran out of the
// instance type (the reason only in LatestOperationErrorMsg). Through the
// real SDK against the emulator, CA sees the instance as instanceCreating
// with errorInfo class 1 (OutOfResources) and the cloud's code, so it
// tries another group; the reason, naming zone and type, is in the
// instance's history (REST); CA's DeleteNodes terminates the VM (no leak)
// and no second VM was ever created (no duplicate).
func TestLaunchFailedForCapacityIsOutOfResources(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	s, emu := startWithEmulator(t, testConfig(t, t.TempDir(), 20000+rand.IntN(20000)))
	defer s.stop(t)
	c := s.client(t)
	const group, zone, instanceType = "workers", "ap-guangzhou-3", "S5.MEDIUM4"
	waitFor(t, "the workers group", func() bool {
		res := call(t, func(ctx context.Context) (*pb.NodeGroupsResponse, error) {
			return c.NodeGroups(ctx, &pb.NodeGroupsRequest{})
		})
		for _, g := range res.GetNodeGroups() {
			if g.GetId() == group {
				return true
			}
		}
		return false
	})

	emu.SetStockOuts([]cvmemu.StockOut{{Zone: zone, InstanceType: instanceType, AtLaunch: true}})
	call(t, func(ctx context.Context) (*pb.NodeGroupIncreaseSizeResponse, error) {
		return c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: group, Delta: 1})
	})
	var failed *pb.Instance
	waitFor(t, "the launch failure reported to CA", func() bool {
		res := call(t, func(ctx context.Context) (*pb.NodeGroupNodesResponse, error) {
			return c.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: group})
		})
		for _, in := range res.GetInstances() {
			if in.GetStatus().GetErrorInfo().GetErrorCode() != "" {
				failed = in
				return true
			}
		}
		return false
	})
	st := failed.GetStatus()
	info := st.GetErrorInfo()
	if st.GetInstanceState() != pb.InstanceStatus_instanceCreating || info.GetInstanceErrorClass() != 1 ||
		info.GetErrorCode() != cvmemu.CodeInsufficientInstanceType {
		t.Fatalf("instance %s: state %v errorInfo %v, want instanceCreating, class 1 (OutOfResources), code %s",
			failed.GetId(), st.GetInstanceState(), info, cvmemu.CodeInsufficientInstanceType)
	}
	if msg := info.GetErrorMessage(); !strings.Contains(msg, zone) || !strings.Contains(msg, instanceType) {
		t.Errorf("error message %q names neither zone %s nor type %s", msg, zone, instanceType)
	}

	// The one VM of the scale-up failed to launch; none was created twice.
	var vm cvmemu.VMInfo
	for _, v := range emu.ListVMs() {
		if v.API == "cvm" {
			if vm.ID != "" {
				t.Fatalf("a second VM %s besides %s", v.ID, vm.ID)
			}
			vm = v
		}
	}
	if vm.State != cvmemu.StateLaunchFailed || !strings.HasSuffix(failed.GetId(), vm.ID) {
		t.Fatalf("VM %+v, want the LAUNCH_FAILED VM of instance %s", vm, failed.GetId())
	}

	// The reason, naming zone and type, is in the instance's history.
	api := restClient{t: t, base: "http://" + s.addrs.REST + "/api/v1", token: s.addrs.AdminToken}
	var list struct {
		Items []struct {
			ID         string `json:"id"`
			ProviderID string `json:"providerID"`
		} `json:"items"`
	}
	must(t, json.Unmarshal(api.must(200, "GET", "/instances?group="+group, "").body, &list))
	if len(list.Items) != 1 || list.Items[0].ProviderID != failed.GetId() {
		t.Fatalf("instances %+v, want the failed one %s", list.Items, failed.GetId())
	}
	var detail struct {
		History []struct {
			Reason string `json:"reason"`
		} `json:"history"`
	}
	must(t, json.Unmarshal(api.must(200, "GET", "/instances/"+list.Items[0].ID, "").body, &detail))
	noted := false
	for _, tr := range detail.History {
		noted = noted || (strings.Contains(tr.Reason, zone) && strings.Contains(tr.Reason, instanceType) && strings.Contains(tr.Reason, cvmemu.CodeInsufficientInstanceType))
	}
	if !noted {
		t.Errorf("no history entry names the stock-out in %s of %s: %+v", zone, instanceType, detail.History)
	}

	// CA deletes the failed instance (a fake node): its VM is terminated.
	call(t, func(ctx context.Context) (*pb.NodeGroupDeleteNodesResponse, error) {
		return c.NodeGroupDeleteNodes(ctx, &pb.NodeGroupDeleteNodesRequest{Id: group, Nodes: []*pb.ExternalGrpcNode{{
			ProviderID: failed.GetId(), Name: failed.GetId(),
			Annotations: map[string]string{"k8s.io/cluster-autoscaler/fake-node-reason": "create-error"},
		}}})
	})
	waitFor(t, "the failed instance deleted and its VM terminated", func() bool {
		res := call(t, func(ctx context.Context) (*pb.NodeGroupNodesResponse, error) {
			return c.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: group})
		})
		info, ok := emu.VM(vm.ID)
		return len(res.GetInstances()) == 0 && (!ok || info.State == cvmemu.StateTerminating)
	})
	if st := emu.Stats(); st.VMsCreated != 1 || st.VMsLaunchFailed != 1 || st.VMsTerminated != 1 {
		t.Errorf("emulator stats %+v: want 1 VM created, failed to launch and terminated", st)
	}
	size := call(t, func(ctx context.Context) (*pb.NodeGroupTargetSizeResponse, error) {
		return c.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: group})
	})
	if size.GetTargetSize() != 0 {
		t.Errorf("target size %d after CA deleted the failed instance, want 0", size.GetTargetSize())
	}
}
