package alibaba_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nodesmith/nodesmith/libs/backoff"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// TestEmulatorInstanceShapes: through the SDK on the emulator, a type a
// zone lists is offered whatever its stock (sold out is marked, not left
// out), a type the zone does not offer, an unknown type and a zone ECS
// does not know are left out, and more than 10 types take several
// DescribeInstanceTypes calls (its InstanceTypes.N limit).
func TestEmulatorInstanceShapes(t *testing.T) {
	const other = "cn-hangzhou-i"
	srv := startEmulator(t, func(c *cvmemu.Config) {
		c.StockOuts = []cvmemu.StockOut{
			{Zone: zone, InstanceType: "ecs.c7.large", Code: cvmemu.ECSCodeNoStock},
			{Zone: zone, InstanceType: "ecs.r7.large", Code: cvmemu.ECSCodeResourceNotSupported},
		}
	})
	c := newAdapter(t, srv, nil, backoff.Policy{})
	var types []string
	for _, it := range cvmemu.DefaultInstanceTypes() {
		if cvmemu.IsECSType(it.InstanceType) {
			types = append(types, it.InstanceType)
		}
	}
	n := len(types)
	if n <= 10 {
		t.Fatalf("the table has %d ECS types; the test needs more than 10", n)
	}
	// Unknown, and a type only its name describes (no zone offers it).
	types = append(types, "nosuch.type", "ecs.g6.3xlarge")
	got, err := c.InstanceShapes(context.Background(), target, []string{zone, other, "cn-shanghai-b"}, types)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[[2]string]domain.InstanceShape{}
	for _, s := range got {
		byKey[[2]string{s.Zone, s.InstanceType}] = s
	}
	if len(byKey) != len(got) {
		t.Fatalf("duplicates in %+v", got)
	}
	// zone: the table without r7 (c7 sold out); other: the whole table.
	if len(got) != 2*n-1 {
		t.Fatalf("%d shapes, want %d: %+v", len(got), 2*n-1, got)
	}
	if s := byKey[[2]string{zone, "ecs.c7.large"}]; !s.SoldOut || s.VCPU != 2 || s.MemoryMiB != 4096 {
		t.Errorf("sold-out c7 = %+v, want offered and SoldOut", s)
	}
	if s := byKey[[2]string{other, "ecs.c7.large"}]; s.SoldOut || s.VCPU != 2 {
		t.Errorf("c7 in %s = %+v, want in stock", other, s)
	}
	if _, ok := byKey[[2]string{zone, "ecs.r7.large"}]; ok {
		t.Errorf("r7 offered in %s, which does not sell it", zone)
	}
	if s := byKey[[2]string{other, "ecs.r7.large"}]; s.MemoryMiB != 16384 || s.Family != "ecs.r7" {
		t.Errorf("r7 in %s = %+v", other, s)
	}
	if s := byKey[[2]string{zone, "ecs.g6.xlarge"}]; s.VCPU != 4 || s.MemoryMiB != 16*1024 || s.Arch != domain.ArchAMD64 || s.Family != "ecs.g6" {
		t.Errorf("g6.xlarge = %+v", s)
	}
	if s := byKey[[2]string{zone, "ecs.gn6i-c4g1.xlarge"}]; s.GPU != 1 || s.GPUModel != "NVIDIA T4" || s.MemoryMiB != 15*1024 {
		t.Errorf("gn6i = %+v", s)
	}
	for _, s := range got {
		if s.Zone == "cn-shanghai-b" || s.InstanceType == "nosuch.type" || s.InstanceType == "ecs.g6.3xlarge" {
			t.Errorf("listed %s/%s", s.Zone, s.InstanceType)
		}
	}
	st := srv.Stats()
	if n := st.Requests[cvmemu.ActionDescribeAvailableResource]; n != 3 {
		t.Errorf("%d DescribeAvailableResource calls, want one per zone (3)", n)
	}
	// More than 10 offered types: two calls of at most 10.
	if n := st.Requests[cvmemu.ActionDescribeInstanceTypes]; n != 2 {
		t.Errorf("%d DescribeInstanceTypes calls, want 2", n)
	}
}

// TestEmulatorInstanceShapesFailuresAreTyped: a throttled catalogue call
// is retried; one throttled every time is surfaced typed, with no partial
// answer.
func TestEmulatorInstanceShapesFailuresAreTyped(t *testing.T) {
	srv := startEmulator(t, nil)
	c := newAdapter(t, srv, nil, backoff.Policy{})
	srv.InjectFaults(cvmemu.ActionDescribeInstanceTypes, cvmemu.Fault{Code: cvmemu.ECSCodeThrottling})
	got, err := c.InstanceShapes(context.Background(), target, []string{zone}, []string{"ecs.g7.large"})
	if err != nil || len(got) != 1 {
		t.Fatalf("after one throttled call = %+v, %v; want the retry's answer", got, err)
	}
	srv.SetFaultsFor(cvmemu.APIECS, cvmemu.ActionDescribeAvailableResource, cvmemu.ActionFaults{ErrorRate: 1, ErrorCode: cvmemu.ECSCodeThrottling})
	got, err = c.InstanceShapes(context.Background(), target, []string{zone}, []string{"ecs.g7.large"})
	if !ports.IsThrottledError(err) || got != nil || errors.Is(err, ports.ErrNotSupported) {
		t.Fatalf("always throttled = %+v, %v; want a throttled error", got, err)
	}
}
