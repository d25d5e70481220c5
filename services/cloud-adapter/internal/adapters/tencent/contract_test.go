package tencent_test

import (
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/backoff"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/adaptertest"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports/cloudtest"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// TestContract runs the ports.Cloud contract suite against the adapter on
// the CVM emulator.
func TestContract(t *testing.T) {
	faults := adaptertest.Faults{
		Terminate: cvmemu.ActionTerminateInstances,
		Throttled: cvmemu.CodeRequestLimitExceeded,
		StockOut:  cvmemu.StockOut{Zone: "ap-guangzhou-3"},
	}
	cloudtest.Run(t, func(t *testing.T) cloudtest.Env {
		srv := startEmulator(t, nil)
		return faults.Env(srv, cloudtest.Env{
			Cloud:       newAdapter(t, srv, adapterOpts{retry: backoff.Policy{Initial: time.Millisecond, Max: 5 * time.Millisecond, Attempts: 3}}),
			Target:      target,
			Parameters:  template,
			MissingID:   "ins-00000000",
			OtherRegion: "ap-shanghai",
			LaunchStockOut: func(*testing.T) func() {
				srv.SetSoldOut(cvmemu.StockOut{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4", Code: cvmemu.CodeZoneSoldOutForType, AtLaunch: true})
				return func() { srv.ClearSoldOut("ap-guangzhou-3", "S5.MEDIUM4") }
			},
			// The emulator's instance type table (cvmemu.DefaultInstanceTypes).
			Shapes: &cloudtest.ShapesEnv{
				Known: domain.InstanceShape{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4", Family: "S5", VCPU: 2, MemoryMiB: 4096, Arch: domain.ArchAMD64},
				Others: []domain.InstanceShape{
					{Zone: "ap-guangzhou-3", InstanceType: "SR1.MEDIUM4", Family: "SR1", VCPU: 2, MemoryMiB: 4096, Arch: domain.ArchARM64},
					{Zone: "ap-guangzhou-3", InstanceType: "GN7.2XLARGE32", Family: "GN7", VCPU: 8, MemoryMiB: 32768, GPU: 1, GPUModel: "GN7", Arch: domain.ArchAMD64},
				},
			},
		})
	})
}
