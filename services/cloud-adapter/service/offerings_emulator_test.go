package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/metrics/metricstest"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/service"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// offeringsCommand is createCommand with offerings in zones, all of type
// S5.MEDIUM4 on demand (as lifecycle resolves them).
func offeringsCommand(batch string, n int, zones ...string) *cloudv1.Command {
	cmd := createCommand(provider, batch, n)
	c := cmd.GetCreate()
	c.Zone, c.InstanceType = zones[0], "S5.MEDIUM4"
	for _, z := range zones {
		c.Offerings = append(c.Offerings, &cloudv1.Offering{Zone: z, InstanceType: "S5.MEDIUM4", CapacityType: "on-demand"})
	}
	return cmd
}

// The fallback path end to end with the real tencentcloud-sdk-go against
// the CVM emulator, marks shared through the real KV bucket: zone 3 answers
// RunInstances sold out, zone 4 accepts the launches and then fails them
// for stock (LAUNCH_FAILED), zone 6 has stock. Every instance ends RUNNING
// in zone 6, the failed VMs are terminated, nothing is reported failed,
// and a later batch skips the marked zones without calling them.
func TestEmulatorOfferingsFallBack(t *testing.T) {
	const (
		gz3, gz4, gz6 = "ap-guangzhou-3", "ap-guangzhou-4", "ap-guangzhou-6"
	)
	srv := startEmulator(t, nil)
	srv.SetSoldOut(cvmemu.StockOut{Zone: gz3, InstanceType: "S5.MEDIUM4"})
	srv.SetSoldOut(cvmemu.StockOut{Zone: gz4, InstanceType: "S5.MEDIUM4", AtLaunch: true})
	s := newStack(t)
	reg := prometheus.NewRegistry()
	cfg := emulatorConfig(srv)
	cfg.OfferingUnavailableTTL = time.Hour
	r := s.startReplica("a", cfg, service.Deps{Environ: credentialsEnv, Registry: reg})
	r.waitReady(t)

	s.publish(messaging.SubjectCloudCreate, "create.b1", offeringsCommand("b1", 3, gz3, gz4, gz6))
	running := func(batch string) map[string]string {
		out := map[string]string{}
		for _, e := range s.recorded() {
			if o := e.ev.GetObserved(); o.GetState() == cloudv1.CloudState_CLOUD_STATE_RUNNING && o.GetPrivateIp() != "" {
				if id := o.GetInstance().GetInstanceId(); len(id) > len(batch) && id[:len(batch)+1] == batch+"-" {
					out[id] = o.GetInstance().GetCloudId()
				}
			}
		}
		return out
	}
	eventually(t, 30*time.Second, "3 instances RUNNING", func() bool { return len(running("b1")) == 3 })

	latest := map[string]string{} // instance -> cloud id of its latest created event
	zoneOf := map[string]string{}
	for _, e := range s.recorded() {
		if f := e.ev.GetCreateFailed(); f != nil {
			t.Fatalf("create failed: %v", f)
		}
		if o := e.ev.GetObserved(); o.GetState() == cloudv1.CloudState_CLOUD_STATE_LAUNCH_FAILED {
			t.Fatalf("a LAUNCH_FAILED reached lifecycle: %v", o)
		}
		c := e.ev.GetCreated()
		for _, ref := range c.GetInstances() {
			latest[ref.GetInstanceId()] = ref.GetCloudId()
			zoneOf[ref.GetCloudId()] = c.GetOffering().GetZone()
		}
	}
	for inst, cid := range running("b1") {
		if latest[inst] != cid {
			t.Errorf("instance %s runs as %s, its latest created event says %s", inst, cid, latest[inst])
		}
		vm, ok := srv.VM(cid)
		if !ok || vm.Zone != gz6 || zoneOf[cid] != gz6 {
			t.Errorf("instance %s's VM %s is in zone %q (event says %q), want %s", inst, cid, vm.Zone, zoneOf[cid], gz6)
		}
	}
	eventually(t, 20*time.Second, "the VMs that failed to launch are terminated", func() bool {
		for _, vm := range srv.ListVMs() {
			if vm.Zone == gz4 && vm.State != cvmemu.StateTerminating {
				return false
			}
		}
		return true
	})
	st := srv.Stats()
	if st.VMsCreated != 6 || st.VMsLaunchFailed != 3 || st.TokensCreatedTwice != 0 {
		t.Fatalf("emulator: %d VMs created, %d failed to launch, %d tokens created twice; want 6 (3 failed in zone 4, 3 in zone 6), 3, 0",
			st.VMsCreated, st.VMsLaunchFailed, st.TokensCreatedTwice)
	}

	// Both zones are marked in the shared bucket.
	kv, err := s.env.JS.KeyValue(context.Background(), messaging.BucketOfferings)
	if err != nil {
		t.Fatal(err)
	}
	for _, z := range []string{gz3, gz4} {
		e, err := kv.Get(context.Background(), messaging.OfferingKey(provider, "acct", "ap-guangzhou", z, "S5.MEDIUM4", "on-demand"))
		if err != nil {
			t.Fatalf("no mark for %s: %v", z, err)
		}
		var m cloudv1.OfferingUnavailable
		if err := proto.Unmarshal(e.Value(), &m); err != nil {
			t.Fatal(err)
		}
		if m.GetOffering().GetZone() != z || m.GetReason().GetKind() != cloudv1.ErrorKind_ERROR_KIND_CAPACITY ||
			!m.GetUntil().AsTime().After(m.GetAt().AsTime().Add(59*time.Minute)) {
			t.Errorf("mark of %s = %v", z, &m)
		}
	}
	for _, m := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"nodesmith_cloud_offerings_marked_unavailable_total", map[string]string{"provider": provider, "zone": gz3, "instance_type": "S5.MEDIUM4", "capacity_type": "on-demand"}, 1},
		{"nodesmith_cloud_offerings_marked_unavailable_total", map[string]string{"provider": provider, "zone": gz4, "instance_type": "S5.MEDIUM4", "capacity_type": "on-demand"}, 3},
		{"nodesmith_cloud_offering_fallbacks_total", map[string]string{"provider": provider, "reason": "create"}, 1},
		{"nodesmith_cloud_offering_fallbacks_total", map[string]string{"provider": provider, "reason": "relaunch"}, 3},
	} {
		if v := metricstest.Value(t, reg, m.name, m.labels); v != m.want {
			t.Errorf("%s%v = %v, want %v", m.name, m.labels, v, m.want)
		}
	}

	// A later batch skips both marked zones: no RunInstances answered sold
	// out, no VM launched (to fail) in zone 4.
	before := srv.Stats()
	s.publish(messaging.SubjectCloudCreate, "create.b2", offeringsCommand("b2", 2, gz3, gz4, gz6))
	eventually(t, 30*time.Second, "b2 RUNNING", func() bool { return len(running("b2")) == 2 })
	after := srv.Stats()
	if n := after.ErrorCodes[cvmemu.CodeInsufficientInstanceType] - before.ErrorCodes[cvmemu.CodeInsufficientInstanceType]; n != 0 {
		t.Errorf("b2 was answered sold out %d times: the marked zone 3 was called", n)
	}
	if after.VMsCreated != before.VMsCreated+2 || after.VMsLaunchFailed != before.VMsLaunchFailed {
		t.Errorf("b2 created %d VMs (%d failed to launch), want 2 (0)", after.VMsCreated-before.VMsCreated, after.VMsLaunchFailed-before.VMsLaunchFailed)
	}
	for _, cid := range running("b2") {
		if vm, _ := srv.VM(cid); vm.Zone != gz6 {
			t.Errorf("b2's VM %s is in zone %s, want %s", cid, vm.Zone, gz6)
		}
	}
}
