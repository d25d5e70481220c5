package offerings_test

import (
	"context"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/libs/testwait"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/offerings"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/offeringstest"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// replica runs a Marks connected as the cloud adapter until the test ends.
func replica(t *testing.T, env *natstest.Env) *offerings.Marks {
	t.Helper()
	_, js := env.ConnectAs(t, natsauth.CloudAdapter)
	m := offerings.New(js, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-m.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("the offerings view did not sync")
	}
	return m
}

func TestMarksContract(t *testing.T) {
	offeringstest.Run(t, func(t *testing.T) (ports.OfferingMarks, ports.OfferingMarks) {
		env := natstest.Start(t)
		return replica(t, env), replica(t, env)
	})
}

// A replica started after a mark was put finds it in its first view, and
// one whose watch broke (the bucket recreated, its marks lost) forgets the
// lost marks and sees the new bucket's.
func TestMarksSurviveAWatchThatBreaks(t *testing.T) {
	env := natstest.Start(t)
	ctx := context.Background()
	tg := domain.Target{Provider: "tencent", Account: "a", Region: "r"}
	a := domain.Offering{Zone: "z1", InstanceType: "t1", CapacityType: "on-demand"}
	b := domain.Offering{Zone: "z2", InstanceType: "t1", CapacityType: "on-demand"}
	now := time.Now()
	first := replica(t, env)
	if err := first.Mark(ctx, domain.OfferingMark{Target: tg, Offering: a, At: now, Until: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	late := replica(t, env)
	if _, ok := late.Unavailable(tg, a); !ok {
		t.Fatal("a replica started after the mark does not see it once synced")
	}

	// Recreate the bucket (as lifecycle's topology Ensure would after it was lost).
	_, admin := env.ConnectAdmin(t)
	if err := admin.DeleteKeyValue(ctx, messaging.BucketOfferings); err != nil {
		t.Fatal(err)
	}
	if err := messaging.Ensure(ctx, env.JS, messaging.DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	kv, err := env.JS.KeyValue(ctx, messaging.BucketOfferings)
	if err != nil {
		t.Fatal(err)
	}
	// Another replica marks b in the new bucket.
	writer := offerings.New(env.JS, nil)
	if err := writer.Mark(ctx, domain.OfferingMark{Target: tg, Offering: b, At: now, Until: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, offerings.Key(tg, b)); err != nil {
		t.Fatalf("the mark is not in the bucket: %v", err)
	}
	testwait.Until(t, 20*time.Second, "the watch re-established on the new bucket", func() bool {
		_, hasB := late.Unavailable(tg, b)
		_, hasA := late.Unavailable(tg, a)
		return hasB && !hasA
	})
}
