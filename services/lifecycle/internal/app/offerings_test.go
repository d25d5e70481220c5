package app_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudspec"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// Offerings (issue 16): lifecycle orders a batch's offerings, records where
// each VM landed, follows a relaunch, and renders providerIDs in the VM's
// zone.

const (
	zoneA = "ap-guangzhou-3"
	zoneB = "ap-guangzhou-4"
	zoneC = "ap-guangzhou-6"
)

func offeringGroup(strategy string) domain.NodeGroup {
	g := group("g", 0, 20, 0)
	g.Hooks = domain.Hooks{}
	g.Template.Zone, g.Template.InstanceType = zoneA, "S5.MEDIUM4"
	g.Template.ProviderIDTemplate = "qcloud:///{{.Zone}}/{{.CloudID}}"
	g.Template.CapacityType, g.Template.MaxPrice = cloudspec.CapacityOnDemand, ""
	g.Template.OfferingStrategy = strategy
	g.Template.Offerings = []cloudspec.Offering{
		{Zone: zoneA, InstanceType: "S5.MEDIUM4"},
		{Zone: zoneB, InstanceType: "S5.MEDIUM4", SubnetID: "subnet-b"},
		{Zone: zoneC, InstanceType: "S5.MEDIUM4", CapacityType: cloudspec.CapacitySpot},
	}
	return g
}

func zonesOf(os []cloudspec.Offering) string {
	zs := make([]string, len(os))
	for i, o := range os {
		zs[i] = o.Zone
	}
	return strings.Join(zs, ",")
}

// lastCreate runs a dispatcher pass and returns the create command it
// published.
func lastCreate(h *harness, before int) ports.CreateCommand {
	h.t.Helper()
	h.app.Pass(h.ctx)
	cs := h.cmds.Snapshot().Creates
	if len(cs) != before+1 {
		h.t.Fatalf("%d create commands, want %d", len(cs), before+1)
	}
	return cs[len(cs)-1]
}

func instanceByID(h *harness, id string) domain.Instance {
	h.t.Helper()
	for _, in := range h.instances("g") {
		if in.ID == id {
			return in
		}
	}
	h.t.Fatalf("no instance %s", id)
	return domain.Instance{}
}

func TestBalancedOfferingsSendTheZoneWithFewestInstancesFirst(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{offeringGroup(cloudspec.StrategyBalanced)})
	land := func(c ports.CreateCommand, rs []ports.InstanceRef, o cloudspec.Offering) {
		t.Helper()
		for _, r := range rs {
			h.event(r.InstanceID, domain.CloudCreated{Attempt: r.Attempt, BatchID: c.BatchID, CloudID: "ins-" + r.InstanceID, Offering: &o})
		}
	}
	h.ok(h.app.IncreaseSize(h.ctx, "g", 1))
	first := lastCreate(h, 0)
	// Nothing live yet: as written, each offering's capacity resolved.
	want := []cloudspec.Offering{
		{Zone: zoneA, InstanceType: "S5.MEDIUM4", CapacityType: cloudspec.CapacityOnDemand},
		{Zone: zoneB, InstanceType: "S5.MEDIUM4", SubnetID: "subnet-b", CapacityType: cloudspec.CapacityOnDemand},
		{Zone: zoneC, InstanceType: "S5.MEDIUM4", CapacityType: cloudspec.CapacitySpot},
	}
	if len(first.Offerings) != 3 || first.Offerings[0] != want[0] || first.Offerings[1] != want[1] || first.Offerings[2] != want[2] {
		t.Fatalf("first batch offerings %+v, want %+v", first.Offerings, want)
	}
	if first.MaxPrice != "" {
		t.Errorf("max price %q", first.MaxPrice)
	}
	land(first, first.Instances, want[0])

	// One instance in A: B, then C (ties in written order), then A.
	h.ok(h.app.IncreaseSize(h.ctx, "g", 4))
	second := lastCreate(h, 1)
	if got := zonesOf(second.Offerings); got != zoneB+","+zoneC+","+zoneA {
		t.Fatalf("second batch tries %s, want B,C,A", got)
	}
	// Two VMs land in B, one in C; the fourth instance's result is lost.
	land(second, second.Instances[:2], want[1])
	land(second, second.Instances[2:3], want[2])
	lost := second.Instances[3]

	// A=1, B=2, C=1: A, then C, then B.
	h.ok(h.app.IncreaseSize(h.ctx, "g", 1))
	third := lastCreate(h, 2)
	if got := zonesOf(third.Offerings); got != zoneA+","+zoneC+","+zoneB {
		t.Errorf("third batch tries %s, want A,C,B", got)
	}

	// The second batch's create is published again for the instance whose
	// result was lost (after a restart and the launch timeout): in the
	// order it was formed with, whatever the zones hold now, so the cloud
	// adapter's per-offering tokens find the VMs it may have made.
	h.restart(nil)
	h.clock.Advance(domain.DefaultPolicy().LaunchTimeout + time.Second)
	h.app.Pass(h.ctx)
	var again *ports.CreateCommand
	for _, c := range h.cmds.Snapshot().Creates[3:] {
		if c.BatchID == second.BatchID {
			again = &c
		}
	}
	if again == nil {
		t.Fatalf("batch %s not published again for %s", second.BatchID, lost.InstanceID)
	}
	if got := zonesOf(again.Offerings); got != zoneB+","+zoneC+","+zoneA {
		t.Errorf("re-published batch tries %s, want its first order B,C,A", got)
	}
}

func TestPriorityOfferingsKeepTheWrittenOrder(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{offeringGroup(cloudspec.StrategyPriority)})
	h.ok(h.app.IncreaseSize(h.ctx, "g", 1))
	c := lastCreate(h, 0)
	o := cloudspec.Offering{Zone: zoneA, InstanceType: "S5.MEDIUM4", CapacityType: cloudspec.CapacityOnDemand}
	h.event(c.Instances[0].InstanceID, domain.CloudCreated{Attempt: c.Instances[0].Attempt, BatchID: c.BatchID, CloudID: "ins-1", Offering: &o})
	h.ok(h.app.IncreaseSize(h.ctx, "g", 1))
	if got := zonesOf(lastCreate(h, 1).Offerings); got != zoneA+","+zoneB+","+zoneC {
		t.Errorf("priority batch tries %s, want A,B,C", got)
	}
}

func TestTemplateWithoutOfferingsSendsNone(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 5, 0)})
	h.ok(h.app.IncreaseSize(h.ctx, "g", 1))
	if c := lastCreate(h, 0); c.Offerings != nil || c.MaxPrice != "" || strings.Contains(c.BatchID, "--") {
		t.Errorf("create without offerings: offerings %v max price %q batch %s", c.Offerings, c.MaxPrice, c.BatchID)
	}
}

func TestInstancesCreatedWithOfferingRecordsWhereTheVMIs(t *testing.T) {
	g := offeringGroup(cloudspec.StrategyPriority)
	g.Template.MaxPrice = ""
	h := newHarness(t, []domain.NodeGroup{g})
	h.ok(h.app.IncreaseSize(h.ctx, "g", 2))
	c := lastCreate(h, 0)
	spotC := cloudspec.Offering{Zone: zoneC, InstanceType: "S5.MEDIUM4", CapacityType: cloudspec.CapacitySpot}
	r0, r1 := c.Instances[0], c.Instances[1]
	h.event(r0.InstanceID, domain.CloudCreated{Attempt: r0.Attempt, BatchID: c.BatchID, CloudID: "ins-c", Offering: &spotC})
	// Without an offering (a create of a template without offerings): the
	// template's zone.
	h.event(r1.InstanceID, domain.CloudCreated{Attempt: r1.Attempt, BatchID: c.BatchID, CloudID: "ins-t"})

	in := instanceByID(h, r0.InstanceID)
	if in.Zone != zoneC || in.InstanceType != "S5.MEDIUM4" || in.CapacityType != cloudspec.CapacitySpot {
		t.Errorf("recorded %s/%s/%s, want %s/S5.MEDIUM4/spot", in.Zone, in.InstanceType, in.CapacityType, zoneC)
	}
	if in.ProviderID != "qcloud:///"+zoneC+"/ins-c" {
		t.Errorf("providerID %s, want the VM's zone %s", in.ProviderID, zoneC)
	}
	if in := instanceByID(h, r1.InstanceID); in.ProviderID != "qcloud:///"+zoneA+"/ins-t" || in.Zone != "" {
		t.Errorf("without an offering: providerID %s zone %q, want the template's zone", in.ProviderID, in.Zone)
	}

	// An observation overtook the InstancesCreated (it records the cloud
	// id without the offering): the InstancesCreated still records where
	// the VM is and fixes the providerID.
	h.ok(h.app.IncreaseSize(h.ctx, "g", 1))
	c2 := lastCreate(h, 1)
	r := c2.Instances[0]
	h.event(r.InstanceID, domain.CloudCreated{Attempt: r.Attempt, CloudID: "ins-b"})
	b := cloudspec.Offering{Zone: zoneB, InstanceType: "S5.MEDIUM4", CapacityType: cloudspec.CapacityOnDemand}
	h.event(r.InstanceID, domain.CloudCreated{Attempt: r.Attempt, BatchID: c2.BatchID, CloudID: "ins-b", Offering: &b})
	if in := instanceByID(h, r.InstanceID); in.Zone != zoneB || in.ProviderID != "qcloud:///"+zoneB+"/ins-b" {
		t.Errorf("late offering: zone %q providerID %s", in.Zone, in.ProviderID)
	}
}

func TestRelaunchReplacesTheCloudID(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{offeringGroup(cloudspec.StrategyPriority)}, withOptions(func(o *app.Options) {
		o.ReconcileInterval = time.Minute
		o.OrphanGrace = 2 * time.Minute
	}))
	h.ok(h.app.IncreaseSize(h.ctx, "g", 1))
	c := lastCreate(h, 0)
	r := c.Instances[0]
	a := cloudspec.Offering{Zone: zoneA, InstanceType: "S5.MEDIUM4", CapacityType: cloudspec.CapacityOnDemand}
	b := cloudspec.Offering{Zone: zoneB, InstanceType: "S5.MEDIUM4", SubnetID: "subnet-b", CapacityType: cloudspec.CapacityOnDemand}
	h.event(r.InstanceID, domain.CloudCreated{Attempt: r.Attempt, BatchID: c.BatchID, CloudID: "ins-first", Offering: &a})

	// The relaunched VM is observed before the InstancesCreated naming it
	// is applied: not applied to the first VM, redelivered.
	if err := h.app.HandleEvent(h.ctx, r.InstanceID, domain.CloudObserved{Attempt: r.Attempt, CloudID: "ins-second", State: domain.CloudRunning, PrivateIP: "10.0.0.9"}); err == nil {
		t.Fatal("an observation of a VM the instance does not know yet was accepted; want an error (redelivery)")
	}
	if in := instanceByID(h, r.InstanceID); in.State != domain.StateCreating || in.PrivateIP != "" {
		t.Fatalf("early observation moved the instance: %s %q", in.State, in.PrivateIP)
	}

	// The first VM failed to launch for capacity: the adapter terminated
	// it and created one in B, under the same batch.
	h.event(r.InstanceID, domain.CloudCreated{Attempt: r.Attempt, BatchID: c.BatchID, CloudID: "ins-second", Offering: &b})
	in := instanceByID(h, r.InstanceID)
	if in.CloudID != "ins-second" || in.Zone != zoneB || in.ProviderID != "qcloud:///"+zoneB+"/ins-second" || in.State != domain.StateCreating {
		t.Fatalf("after the relaunch: %s %s %s %s", in.CloudID, in.Zone, in.ProviderID, in.State)
	}
	if last := in.History[len(in.History)-1].Reason; !strings.Contains(last, "relaunched in "+zoneB+"/S5.MEDIUM4") {
		t.Errorf("history note %q, want the relaunch", last)
	}

	// A redelivered result naming the first VM never moves the record
	// back, nor does an observation of it.
	h.event(r.InstanceID, domain.CloudCreated{Attempt: r.Attempt, BatchID: c.BatchID, CloudID: "ins-first", Offering: &a})
	h.event(r.InstanceID, domain.CloudCreated{Attempt: r.Attempt, CloudID: "ins-first"})
	h.event(r.InstanceID, domain.CloudObserved{Attempt: r.Attempt, CloudID: "ins-first", State: domain.CloudLaunchFailed})
	if in := instanceByID(h, r.InstanceID); in.CloudID != "ins-second" || in.Zone != zoneB || in.CreationFailed || in.State != domain.StateCreating {
		t.Fatalf("a stale result moved the record back: %s %s failed=%v %s", in.CloudID, in.Zone, in.CreationFailed, in.State)
	}
	h.event(r.InstanceID, domain.CloudObserved{Attempt: r.Attempt, CloudID: "ins-second", State: domain.CloudRunning, PrivateIP: "10.0.0.9"})
	in = instanceByID(h, r.InstanceID)
	if in.State == domain.StateCreating || in.PrivateIP != "10.0.0.9" {
		t.Fatalf("the relaunched VM's RUNNING was not applied: %s", in.State)
	}

	// Once the instance moved on, another VM named for it is no relaunch.
	c3 := cloudspec.Offering{Zone: zoneC, InstanceType: "S5.MEDIUM4", CapacityType: cloudspec.CapacitySpot}
	h.event(r.InstanceID, domain.CloudCreated{Attempt: r.Attempt, BatchID: c.BatchID, CloudID: "ins-third", Offering: &c3})
	if in := instanceByID(h, r.InstanceID); in.CloudID != "ins-second" {
		t.Fatalf("a relaunch replaced the VM of a %s instance: %s", in.State, in.CloudID)
	}

	// The reconciler: the first VM (tagged with the instance id, not yet
	// gone) is an orphan, the instance's VM is the relaunched one.
	h.clock.Advance(10 * time.Minute)
	h.app.RequestInventory(h.ctx)
	reqs := h.cmds.Snapshot().Inventory
	inv := app.Inventory{RequestID: reqs[len(reqs)-1].RequestID, Target: reqs[len(reqs)-1].Target}
	now := h.clock.Now()
	inv.Items = []app.InventoryItem{
		{CloudID: "ins-first", InstanceID: r.InstanceID, BatchID: c.BatchID, Group: "g", State: domain.CloudLaunchFailed, CreatedAt: now.Add(-9 * time.Minute)},
		{CloudID: "ins-second", InstanceID: r.InstanceID, BatchID: c.BatchID, Group: "g", State: domain.CloudRunning, CreatedAt: now.Add(-8 * time.Minute)},
	}
	before := len(h.cmds.Snapshot().Terminates)
	if err := h.app.HandleInventory(h.ctx, inv); err != nil {
		t.Fatal(err)
	}
	terms := h.cmds.Snapshot().Terminates[before:]
	if len(terms) != 1 || len(terms[0].Instances) != 1 || terms[0].Instances[0].CloudID != "ins-first" {
		t.Fatalf("orphan terminations %+v, want only the first VM", terms)
	}
	if in := instanceByID(h, r.InstanceID); in.CloudID != "ins-second" || in.State == domain.StateDeleted {
		t.Errorf("the reconciler took the first VM for the instance's: %s %s", in.CloudID, in.State)
	}
}
