package tencent_test

import (
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/backoff"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports/cloudtest"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// TestContract runs the ports.Cloud contract suite against the adapter on
// the CVM emulator.
func TestContract(t *testing.T) {
	actions := map[cloudtest.Op]string{
		cloudtest.OpCreate:    cvmemu.ActionRunInstances,
		cloudtest.OpDescribe:  cvmemu.ActionDescribeInstances,
		cloudtest.OpList:      cvmemu.ActionDescribeInstances,
		cloudtest.OpTerminate: cvmemu.ActionTerminateInstances,
	}
	cloudtest.Run(t, func(t *testing.T) cloudtest.Env {
		srv := startEmulator(t, nil)
		c := newAdapter(t, srv, adapterOpts{retry: backoff.Policy{Initial: time.Millisecond, Max: 5 * time.Millisecond, Attempts: 3}})
		return cloudtest.Env{
			Cloud:       c,
			Target:      target,
			Parameters:  template,
			MissingID:   "ins-00000000",
			OtherRegion: "ap-shanghai",
			Throttle: func(_ *testing.T, op cloudtest.Op) func() {
				srv.SetFaults(actions[op], cvmemu.ActionFaults{ErrorRate: 1, ErrorCode: cvmemu.CodeRequestLimitExceeded})
				return func() { srv.SetFaults(actions[op], cvmemu.ActionFaults{}) }
			},
			StockOut: func(*testing.T) func() {
				srv.SetStockOuts([]cvmemu.StockOut{{Zone: "ap-guangzhou-3"}})
				return func() { srv.SetStockOuts(nil) }
			},
		}
	})
}
