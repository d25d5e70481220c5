package tencent_test

import (
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/backoff"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/adaptertest"
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
		})
	})
}
