package memory_test

import (
	"testing"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/memory"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/storetest"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

func TestStoreContract(t *testing.T) {
	storetest.Run(t, func(*testing.T) ports.Store { return memory.NewStore() })
}

func TestCatalogContract(t *testing.T) {
	storetest.RunCatalog(t, func(*testing.T) ports.CatalogStore { return memory.NewStore() })
}

func TestHoldContract(t *testing.T) {
	storetest.RunHold(t, func(*testing.T) storetest.HoldHarness {
		s := memory.NewStore()
		return storetest.HoldHarness{Store: s, LoseInstances: func(*testing.T) { s.LoseInstances() }}
	})
}

func TestStoreFeedContract(t *testing.T) {
	storetest.RunFeed(t, func(*testing.T) storetest.FeedStore { return memory.NewStore() })
}
