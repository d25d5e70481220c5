package natskv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/natskv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/storetest"
)

// The ports.HoldStore contract on one server; each subtest purges the
// hold first.
func TestHoldContract(t *testing.T) {
	env := natstest.Start(t)
	_, admin := env.ConnectAdmin(t)
	storetest.RunHold(t, func(t *testing.T) storetest.HoldHarness {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		groups, err := admin.KeyValue(ctx, messaging.BucketGroups)
		if err != nil {
			t.Fatal(err)
		}
		if err := groups.Purge(ctx, messaging.KeyOrphanHold); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatal(err)
		}
		s, err := natskv.Open(ctx, env.JS)
		if err != nil {
			t.Fatal(err)
		}
		return storetest.HoldHarness{Store: s, LoseInstances: func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := admin.DeleteKeyValue(ctx, messaging.BucketInstances); err != nil {
				t.Fatal(err)
			}
			if err := messaging.Ensure(ctx, env.JS, messaging.DefaultOptions()); err != nil {
				t.Fatal(err)
			}
		}}
	})
}
