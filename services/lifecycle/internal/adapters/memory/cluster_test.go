package memory_test

import (
	"context"
	"testing"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/clustertest"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/memory"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

func TestClusterContract(t *testing.T) {
	for _, omit := range []bool{false, true} {
		name := "with NodesSynced"
		if omit {
			name = "without NodesSynced"
		}
		t.Run(name, func(t *testing.T) {
			clustertest.Run(t, func(*testing.T) clustertest.Harness {
				c := memory.NewCluster()
				c.NoSyncedEvent = omit
				return clustertest.Harness{
					Cluster: c,
					Put:     func(_ *testing.T, n ports.Node) { c.Put(n) },
					Get:     func(_ *testing.T, name string) (ports.Node, bool) { return c.Get(name) },
					Remove: func(t *testing.T, name string) {
						if err := c.DeleteNode(context.Background(), name); err != nil {
							t.Error(err)
						}
					},
					OmitsSynced: omit,
				}
			})
		})
	}
}
