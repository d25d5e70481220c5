package fake_test

import (
	"testing"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/fake"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports/cloudtest"
)

func TestContract(t *testing.T) {
	cloudtest.Run(t, func(t *testing.T) cloudtest.Env {
		c := fake.NewCloud()
		return cloudtest.Env{
			Cloud:       c,
			Target:      ports.Target{Account: "acct", Region: "region-1"},
			Parameters:  `{}`,
			MissingID:   "ins-missing",
			OtherRegion: "region-2",
			Throttle: func(_ *testing.T, op cloudtest.Op) func() {
				c.FailAlways(fake.Op(op), ports.NewThrottledError("RequestLimitExceeded", "fake throttling"))
				return func() { c.FailAlways(fake.Op(op), nil) }
			},
			StockOut: func(*testing.T) func() {
				c.FailAlways(fake.OpCreate, ports.NewCapacityError("ResourceInsufficient.SpecifiedInstanceType", "fake stock-out"))
				return func() { c.FailAlways(fake.OpCreate, nil) }
			},
			LaunchStockOut: func(*testing.T) func() {
				c.FailLaunches(&domain.LaunchError{Kind: ports.ErrorKindCapacity, Code: "ResourceInsufficient.SpecifiedInstanceType", Message: "fake: sold out"})
				return func() { c.FailLaunches(nil) }
			},
			Shapes: func() *cloudtest.ShapesEnv {
				known := domain.InstanceShape{Zone: "fake-zone-1", InstanceType: "F.MEDIUM4", Family: "F", VCPU: 2, MemoryMiB: 4096, Arch: domain.ArchAMD64}
				other := domain.InstanceShape{Zone: "fake-zone-1", InstanceType: "F.LARGE8", Family: "F", VCPU: 4, MemoryMiB: 8192, Arch: domain.ArchAMD64}
				elsewhere := known
				elsewhere.Zone = "fake-zone-2"
				c.SetShapes(known, other, elsewhere)
				return &cloudtest.ShapesEnv{Known: known, Others: []domain.InstanceShape{other}}
			}(),
		}
	})
}
