package natskv_test

import (
	"context"
	"testing"

	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/natskv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/storetest"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

func TestStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) ports.Store {
		env := natstest.Start(t)
		s, err := natskv.Open(context.Background(), env.JS)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestCatalogContract(t *testing.T) {
	storetest.RunCatalog(t, func(t *testing.T) ports.CatalogStore {
		env := natstest.Start(t)
		s, err := natskv.Open(context.Background(), env.JS)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestStoreFeedContract(t *testing.T) {
	storetest.RunFeed(t, func(t *testing.T) storetest.FeedStore {
		env := natstest.Start(t)
		s, err := natskv.Open(context.Background(), env.JS)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
