package embedded

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// TestECSGroupScalesThroughExternalGRPC is the acceptance path of the
// Alibaba Cloud group of `make run`: Cluster Autoscaler's calls on
// "ecs-workers" go through lifecycle, the cloud adapter's Alibaba adapter
// (the official SDK), the emulator's ECS API, the SSH join hook and the
// simulated cluster to five Running nodes with Alibaba providerIDs; a
// scale-down deletes them (the drain hook runs, DeleteInstances releases
// the VMs); a stock-out is reported to CA as OutOfResources (class 1).
func TestECSGroupScalesThroughExternalGRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	s, emu := startWithEmulator(t, testConfig(t, t.TempDir(), 20000+rand.IntN(20000)))
	defer s.stop(t)
	c := s.client(t)
	const group = "ecs-workers"
	alibaba, _ := cloudspec.Lookup(cloudspec.Alibaba)

	// Both groups of the built-in configuration, one per cloud.
	waitFor(t, "the built-in groups", func() bool {
		res := call(t, func(ctx context.Context) (*pb.NodeGroupsResponse, error) {
			return c.NodeGroups(ctx, &pb.NodeGroupsRequest{})
		})
		ids := map[string]bool{}
		for _, g := range res.GetNodeGroups() {
			ids[g.GetId()] = true
		}
		return ids["workers"] && ids[group]
	})

	call(t, func(ctx context.Context) (*pb.NodeGroupIncreaseSizeResponse, error) {
		return c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: group, Delta: 5})
	})
	running := waitRunning(t, c, group, 5)

	// Every node is an ECS VM of the alibaba-dev account that ran the join
	// hook: it joined as the providerID lifecycle gave it, Alibaba's format.
	vms := map[string]cvmemu.VMInfo{} // by providerID
	for _, vm := range emu.ListVMs() {
		if vm.ProviderID != "" {
			vms[vm.ProviderID] = vm
		}
	}
	var nodes []*pb.ExternalGrpcNode
	for _, in := range running {
		parts, ok := alibaba.ParseProviderID(in.GetId())
		if !ok || parts.Region != "cn-hangzhou" {
			t.Fatalf("instance id %q is not an Alibaba providerID of cn-hangzhou", in.GetId())
		}
		vm, ok := vms[in.GetId()]
		if !ok {
			t.Fatalf("no VM joined the cluster as %s (the join hook did not run)", in.GetId())
		}
		if vm.API != "ecs" || vm.Account != alibabaAccount || vm.ID != parts.CloudID || vm.Zone != "cn-hangzhou-h" {
			t.Fatalf("VM %+v is not the ECS VM of %s", vm, in.GetId())
		}
		ng := call(t, func(ctx context.Context) (*pb.NodeGroupForNodeResponse, error) {
			return c.NodeGroupForNode(ctx, &pb.NodeGroupForNodeRequest{Node: &pb.ExternalGrpcNode{ProviderID: in.GetId(), Name: vm.NodeName}})
		})
		if ng.GetNodeGroup().GetId() != group {
			t.Fatalf("NodeGroupForNode(%s) = %q, want %s", in.GetId(), ng.GetNodeGroup().GetId(), group)
		}
		nodes = append(nodes, &pb.ExternalGrpcNode{ProviderID: in.GetId(), Name: vm.NodeName})
	}

	// Scale down: CA deletes the five nodes.
	call(t, func(ctx context.Context) (*pb.NodeGroupDeleteNodesResponse, error) {
		return c.NodeGroupDeleteNodes(ctx, &pb.NodeGroupDeleteNodesRequest{Id: group, Nodes: nodes})
	})
	waitFor(t, "the group empty and its VMs released", func() bool {
		res := call(t, func(ctx context.Context) (*pb.NodeGroupNodesResponse, error) {
			return c.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: group})
		})
		if len(res.GetInstances()) != 0 {
			return false
		}
		for _, n := range nodes {
			parts, _ := alibaba.ParseProviderID(n.GetProviderID())
			if vm, ok := emu.VM(parts.CloudID); ok && vm.State != cvmemu.StateTerminating {
				return false
			}
		}
		return true
	})
	if st := emu.Stats(); st.VMsTerminated < 5 {
		t.Fatalf("the emulator terminated %d VMs, want the 5", st.VMsTerminated)
	}

	// A stock-out in the zone: CA sees the instance's creation fail as
	// OutOfResources, with ECS's code.
	emu.SetStockOuts([]cvmemu.StockOut{{Zone: "cn-hangzhou-h", Code: cvmemu.ECSCodeNoStock}})
	call(t, func(ctx context.Context) (*pb.NodeGroupIncreaseSizeResponse, error) {
		return c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: group, Delta: 1})
	})
	var info *pb.InstanceErrorInfo
	waitFor(t, "the stock-out reported to CA", func() bool {
		res := call(t, func(ctx context.Context) (*pb.NodeGroupNodesResponse, error) {
			return c.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: group})
		})
		for _, in := range res.GetInstances() {
			if ei := in.GetStatus().GetErrorInfo(); ei.GetErrorCode() != "" {
				info = ei
				return true
			}
		}
		return false
	})
	if info.GetInstanceErrorClass() != 1 || !strings.Contains(info.GetErrorCode()+" "+info.GetErrorMessage(), cvmemu.ECSCodeNoStock) {
		t.Fatalf("errorInfo %v, want class 1 (OutOfResources) naming %s", info, cvmemu.ECSCodeNoStock)
	}
}

// waitFor polls cond for up to 90s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 90s: still waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
