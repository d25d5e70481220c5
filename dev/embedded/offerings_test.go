package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/libs/restapi"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// TestOfferingsFallBackAcrossZones is issue 16's acceptance through every
// service, with the real Tencent SDK against the emulator: the workers
// template has offerings in zones A, B and C (balanced).
//   - A sold out: a scale-up of 10 (5, then 5) lands in B and C, CA never
//     sees a class-1 error, and no VM is created twice (10 VMs).
//   - After the unavailable mark's TTL, A is tried again (and has stock).
//   - All three sold out: CA sees class 1 (OutOfResources).
//   - A VM that fails to launch for capacity (a stock-out after the launch
//     was accepted) is relaunched elsewhere and terminated: the instance
//     runs on the new VM, and no VM leaks.
func TestOfferingsFallBackAcrossZones(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	const (
		group, itype     = "workers", "S5.MEDIUM4"
		zoneA, zoneB, zc = "ap-guangzhou-3", "ap-guangzhou-4", "ap-guangzhou-6"
		ttl              = 4 * time.Second
	)
	dir := t.TempDir()
	withOfferings := strings.Replace(string(DefaultNodeGroupConfig),
		"    zone: ap-guangzhou-3\n    instanceType: S5.MEDIUM4\n",
		"    offeringStrategy: balanced\n    offerings:\n"+
			"      - {zone: "+zoneA+", instanceType: "+itype+"}\n"+
			"      - {zone: "+zoneB+", instanceType: "+itype+"}\n"+
			"      - {zone: "+zc+", instanceType: "+itype+"}\n", 1)
	if withOfferings == string(DefaultNodeGroupConfig) {
		t.Fatal("the built-in configuration no longer has the template this test rewrites")
	}
	file := filepath.Join(dir, "offerings.yaml")
	must(t, os.WriteFile(file, []byte(withOfferings), 0o600))
	cfg := testConfig(t, filepath.Join(dir, "data"), 20000+rand.IntN(20000))
	cfg.ConfigFile = file
	cfg.OfferingUnavailableTTL = ttl
	s, emu := startWithEmulator(t, cfg)
	defer s.stop(t)
	c := s.client(t)
	api := restClient{t: t, base: "http://" + s.addrs.REST + "/api/v1", token: s.addrs.AdminToken}

	nodes := func() []*pb.Instance {
		return call(t, func(ctx context.Context) (*pb.NodeGroupNodesResponse, error) {
			return c.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: group})
		}).GetInstances()
	}
	// classOne fails the test when CA is shown an OutOfResources error.
	noClassOne := func() {
		t.Helper()
		for _, in := range nodes() {
			if info := in.GetStatus().GetErrorInfo(); info.GetInstanceErrorClass() == 1 {
				t.Fatalf("CA sees instance %s out of resources (%s: %s) although a zone has stock", in.GetId(), info.GetErrorCode(), info.GetErrorMessage())
			}
		}
	}
	running := func() int {
		n := 0
		for _, in := range nodes() {
			if in.GetStatus().GetInstanceState() == pb.InstanceStatus_instanceRunning {
				n++
			}
		}
		return n
	}
	// vms counts the CVM VMs per zone and state.
	vms := func() map[string]int {
		out := map[string]int{}
		for _, v := range emu.ListVMs() {
			if v.API == "cvm" {
				out[v.Zone+" "+v.State]++
			}
		}
		return out
	}
	scaleUp := func(n int32) {
		call(t, func(ctx context.Context) (*pb.NodeGroupIncreaseSizeResponse, error) {
			return c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: group, Delta: n})
		})
	}
	waitRunning := func(want int) {
		t.Helper()
		waitFor(t, "running instances", func() bool {
			noClassOne()
			return running() == want
		})
	}
	noMarks := func() bool {
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		must(t, json.Unmarshal(api.must(200, "GET", "/offerings/unavailable", "").body, &list))
		return len(list.Items) == 0
	}
	waitFor(t, "the workers group", func() bool {
		return len(call(t, func(ctx context.Context) (*pb.NodeGroupsResponse, error) {
			return c.NodeGroups(ctx, &pb.NodeGroupsRequest{})
		}).GetNodeGroups()) > 0
	})

	// Zone A sold out: 5 land in B (A first, out of stock), then 5 in C
	// (A and C have no instance, A is marked or sold out: C).
	emu.SetSoldOut(cvmemu.StockOut{Zone: zoneA, InstanceType: itype})
	scaleUp(5)
	waitRunning(5)
	scaleUp(5)
	waitRunning(10)
	got := vms()
	// (Balanced: 5 and 5 when each scale-up is one batch; the dispatcher
	// may split one, so only "both zones, nothing in A" is asserted.)
	if got[zoneB+" RUNNING"] == 0 || got[zc+" RUNNING"] == 0 || got[zoneB+" RUNNING"]+got[zc+" RUNNING"] != 10 || len(got) != 2 {
		t.Fatalf("VMs per zone and state %v, want 10 RUNNING in %s and %s, nothing else", got, zoneB, zc)
	}
	t.Logf("10 instances with zone A sold out: %v", got)
	// The REST view of each instance names the zone its VM is in, the
	// type and the resolved capacity (issue 16's record, through the
	// gateway's read model).
	vmZone := map[string]string{}
	for _, v := range emu.ListVMs() {
		vmZone[v.ID] = v.Zone
	}
	lastMismatch := ""
	waitFor(t, "the REST instance views to name each VM's zone", func() bool {
		var list restapi.InstanceList
		must(t, json.Unmarshal(api.must(200, "GET", "/instances?group="+group+"&state=RUNNING", "").body, &list))
		if len(list.Items) != 10 {
			return false
		}
		for _, in := range list.Items {
			if in.Zone != vmZone[in.CloudID] || in.InstanceType != itype || in.CapacityType != cloudspec.CapacityOnDemand {
				if m := fmt.Sprintf("instance %s (VM %s in %s): zone %q, type %q, capacity %q", in.ID, in.CloudID, vmZone[in.CloudID], in.Zone, in.InstanceType, in.CapacityType); m != lastMismatch {
					t.Log(m)
					lastMismatch = m
				}
				return false
			}
		}
		return true
	})
	if st := emu.Stats(); st.VMsCreated != 10 {
		t.Fatalf("%d VMs created for 10 instances", st.VMsCreated)
	}

	// A has stock again; once its mark expired it is tried first (it has
	// the fewest instances) and the next instance lands there.
	emu.ClearSoldOut(zoneA, itype)
	waitFor(t, "zone A's unavailable mark to expire", noMarks)
	scaleUp(1)
	waitRunning(11)
	if got := vms(); got[zoneA+" RUNNING"] != 1 {
		t.Fatalf("VMs per zone and state %v, want one RUNNING in %s after the TTL", got, zoneA)
	}

	// Every zone sold out: CA is told OutOfResources (class 1).
	for _, z := range []string{zoneA, zoneB, zc} {
		emu.SetSoldOut(cvmemu.StockOut{Zone: z, InstanceType: itype})
	}
	scaleUp(1)
	var failed *pb.Instance
	waitFor(t, "OutOfResources reported to CA", func() bool {
		for _, in := range nodes() {
			if in.GetStatus().GetErrorInfo().GetInstanceErrorClass() == 1 {
				failed = in
				return true
			}
		}
		return false
	})
	if st := failed.GetStatus(); st.GetInstanceState() != pb.InstanceStatus_instanceCreating {
		t.Errorf("the instance out of resources is %v, want instanceCreating", st.GetInstanceState())
	}
	if st := emu.Stats(); st.VMsCreated != 11 {
		t.Fatalf("%d VMs created, want 11 (none for the instance out of resources)", st.VMsCreated)
	}
	// CA deletes it (a fake node), as it does after an OutOfResources.
	call(t, func(ctx context.Context) (*pb.NodeGroupDeleteNodesResponse, error) {
		return c.NodeGroupDeleteNodes(ctx, &pb.NodeGroupDeleteNodesRequest{Id: group, Nodes: []*pb.ExternalGrpcNode{{
			ProviderID: failed.GetId(), Name: failed.GetId(),
			Annotations: map[string]string{"k8s.io/cluster-autoscaler/fake-node-reason": "create-error"},
		}}})
	})
	waitFor(t, "the instance out of resources deleted", func() bool { return len(nodes()) == 11 })

	// A accepts launches but its VMs then fail for want of stock; B and C
	// have stock. The next instance goes to A first (it has the fewest
	// instances): its VM fails to launch, is terminated, and the instance
	// runs on a VM relaunched in another zone.
	emu.SetStockOuts(nil)
	emu.SetSoldOut(cvmemu.StockOut{Zone: zoneA, InstanceType: itype, AtLaunch: true})
	waitFor(t, "the marks to expire", noMarks)
	scaleUp(1)
	waitRunning(12)
	waitFor(t, "the VM that failed to launch terminated", func() bool {
		got := vms()
		return got[zoneA+" "+cvmemu.StateLaunchFailed] == 0 && got[zoneA+" "+cvmemu.StateTerminating] == 1
	})
	got = vms()
	if got[zoneA+" RUNNING"] != 1 || got[zoneB+" RUNNING"]+got[zc+" RUNNING"] != 11 {
		t.Fatalf("VMs per zone and state %v, want the relaunched instance RUNNING in %s or %s", got, zoneB, zc)
	}
	if st := emu.Stats(); st.VMsCreated != 13 || st.VMsLaunchFailed != 1 {
		t.Fatalf("emulator stats %+v: want 13 VMs created (one failed to launch and was relaunched)", st)
	}
	// Every Running instance's VM is a RUNNING VM: the relaunched instance
	// took the new VM's id, not the failed one's.
	runningVMs := map[string]bool{}
	for _, v := range emu.ListVMs() {
		if v.API == "cvm" && v.State == cvmemu.StateRunning {
			runningVMs[v.ID] = true
		}
	}
	for _, in := range nodes() {
		id := in.GetId()
		if !runningVMs[id[strings.LastIndex(id, "/")+1:]] {
			t.Errorf("instance %s is not on a RUNNING VM", id)
		}
	}
}
