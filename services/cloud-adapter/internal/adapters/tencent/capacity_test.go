package tencent_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// A stock-out answer, whichever real code, is a capacity error naming the
// zone and the instance type, after one call (not retried).
func TestEmulatorStockOutNamesZoneAndType(t *testing.T) {
	srv := startEmulator(t, nil)
	c := newAdapter(t, srv, adapterOpts{})
	for i, code := range []string{
		cvmemu.CodeInsufficientInstanceType, cvmemu.CodeZoneSoldOutForType, cvmemu.CodeSoldOutInstanceType,
		cvmemu.CodeInsufficientAvailableZone, "ResourcesSoldOut.AvailableZone", cvmemu.CodeSpotInsufficientOffering,
	} {
		srv.SetSoldOut(cvmemu.StockOut{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4", Code: code})
		calls := srv.Stats().RunInstancesCalls
		_, err := c.CreateBatch(context.Background(), ports.CreateRequest{
			Target: target, ClientToken: "so-" + string(rune('a'+i)), Template: "small", Parameters: template, Count: 2,
		})
		ce, ok := ports.AsCloudError(err)
		if !ok || ce.Kind != ports.ErrorKindCapacity || ce.Code != code {
			t.Fatalf("%s: CreateBatch = %v, want a capacity error with the code", code, err)
		}
		if !strings.Contains(ce.Message, "zone ap-guangzhou-3") || !strings.Contains(ce.Message, "instance type S5.MEDIUM4") {
			t.Fatalf("%s: message %q does not name zone and type", code, ce.Message)
		}
		if n := srv.Stats().RunInstancesCalls - calls; n != 1 {
			t.Fatalf("%s: %d RunInstances calls, want 1 (capacity is not retried)", code, n)
		}
	}
	if n := srv.Stats().VMsCreated; n != 0 {
		t.Fatalf("stock-outs created %d VMs", n)
	}
}

// A template made spot by cloudspec launches SPOTPAID VMs the emulator
// accepts (it validates InstanceMarketOptions as the real API does).
func TestEmulatorSpotTemplate(t *testing.T) {
	srv := startEmulator(t, nil)
	c := newAdapter(t, srv, adapterOpts{})
	var mu sync.Mutex
	var bodies []string
	srv.ObserveRunInstances(func(_ string, body []byte) {
		mu.Lock()
		defer mu.Unlock()
		bodies = append(bodies, string(body))
	})
	p, _ := cloudspec.Lookup(cloudspec.Tencent)
	tpl := cloudspec.Template{CapacityType: cloudspec.CapacitySpot, MaxPrice: "0.2", Parameters: template}
	if errs := p.Reconcile(&tpl); errs != nil {
		t.Fatal(errs)
	}
	if errs := p.ValidateParameters(tpl.Parameters); errs != nil {
		t.Fatal(errs)
	}
	ids, err := c.CreateBatch(context.Background(), ports.CreateRequest{
		Target: target, ClientToken: "spot-1", Template: "spot", Parameters: tpl.Parameters, Count: 2,
	})
	if err != nil {
		t.Fatalf("CreateBatch spot: %v", err)
	}
	for _, id := range ids {
		if vm, ok := srv.VM(id); !ok || !vm.Spot {
			t.Fatalf("VM %s is not a spot VM: %+v", id, vm)
		}
	}
	mu.Lock()
	var sent struct {
		InstanceChargeType    string
		InstanceMarketOptions struct {
			MarketType  string
			SpotOptions struct{ MaxPrice, SpotInstanceType string }
		}
	}
	err = json.Unmarshal([]byte(bodies[0]), &sent)
	mu.Unlock()
	if err != nil || sent.InstanceChargeType != "SPOTPAID" || sent.InstanceMarketOptions.MarketType != "spot" ||
		sent.InstanceMarketOptions.SpotOptions.MaxPrice != "0.2" || sent.InstanceMarketOptions.SpotOptions.SpotInstanceType != "one-time" {
		t.Fatalf("RunInstances sent %+v (%v)", sent, err)
	}

	// A spot request the API refuses is invalid parameters, not retried.
	_, err = c.CreateBatch(context.Background(), ports.CreateRequest{
		Target: target, ClientToken: "spot-2", Template: "spot",
		Parameters: `{"InstanceType":"S5.MEDIUM4","ImageId":"img-test","Placement":{"Zone":"ap-guangzhou-3"},"InstanceChargeType":"SPOTPAID"}`, Count: 1,
	})
	if !ports.IsInvalidParametersError(err) {
		t.Fatalf("SPOTPAID without market options = %v, want invalid parameters", err)
	}
}

// The catalogue's SOLD_OUT shows in InstanceShapes.
func TestEmulatorInstanceShapesSoldOut(t *testing.T) {
	srv := startEmulator(t, func(cfg *cvmemu.Config) { cfg.Zones = []string{"ap-guangzhou-3", "ap-guangzhou-4"} })
	c := newAdapter(t, srv, adapterOpts{})
	srv.SetSoldOut(cvmemu.StockOut{Zone: "ap-guangzhou-4", InstanceType: "S5.LARGE8"})
	got, err := c.InstanceShapes(context.Background(), target, []string{"ap-guangzhou-3", "ap-guangzhou-4"}, []string{"S5.LARGE8"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("shapes %+v, want one per zone", got)
	}
	for _, s := range got {
		want := domain.InstanceShape{Zone: s.Zone, InstanceType: "S5.LARGE8", Family: "S5", VCPU: 4, MemoryMiB: 8192, Arch: domain.ArchAMD64, SoldOut: s.Zone == "ap-guangzhou-4"}
		if s != want {
			t.Fatalf("shape %+v, want %+v", s, want)
		}
	}
}

// A launch the cloud accepted and then failed for want of stock is
// LAUNCH_FAILED with a capacity LaunchError naming the code, zone and type.
func TestEmulatorLaunchFailedForCapacity(t *testing.T) {
	srv := startEmulator(t, nil)
	c := newAdapter(t, srv, adapterOpts{})
	srv.SetSoldOut(cvmemu.StockOut{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4", Code: cvmemu.CodeSoldOutInstanceType, AtLaunch: true})
	ids := create(t, c, "lf-1", 1, nil)
	deadline := time.Now().Add(20 * time.Second)
	for {
		sts, err := c.Describe(context.Background(), target, ids)
		if err != nil {
			t.Fatal(err)
		}
		if len(sts) == 1 && sts[0].State == domain.StateLaunchFailed {
			le := sts[0].LaunchError
			if le == nil || le.Kind != ports.ErrorKindCapacity || le.Code != cvmemu.CodeSoldOutInstanceType ||
				!strings.Contains(le.Message, "zone ap-guangzhou-3") || !strings.Contains(le.Message, "instance type S5.MEDIUM4") {
				t.Fatalf("launch error %+v", le)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("never LAUNCH_FAILED: %+v", sts)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
