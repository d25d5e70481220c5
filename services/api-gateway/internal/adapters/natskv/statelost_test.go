package natskv_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natstest"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/fakelifecycle"
)

// State loss: the instances bucket is deleted under the running gateway
// and recreated (lifecycle starts again) with other records, at lower
// revisions. The read model must stop serving the lost instances to CA
// and serve the new ones, and read-your-writes must wait for the new
// bucket's revisions.
func TestWatcherFollowsARecreatedInstancesBucket(t *testing.T) {
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store, err := fakelifecycle.NewStore(ctx, env.Conn, env.JS)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		for _, id := range []string{"i-1", "i-2", "i-3"} {
			if _, err := store.PutInstance(ctx, instance("g", id, statev1.InstanceState_INSTANCE_STATE_RUNNING)); err != nil {
				t.Fatal(err)
			}
		}
	}
	rm := app.NewReadModel()
	startWatcher(t, gatewayJS(t, env), rm, nil)
	if _, ok := rm.Instance("i-3"); !ok {
		t.Fatal("i-3 not loaded")
	}

	lost := time.Now()
	_, admin := env.ConnectAdmin(t) // losing state is no service's right
	if err := admin.DeleteKeyValue(ctx, messaging.BucketInstances); err != nil {
		t.Fatal(err)
	}
	if err := messaging.Ensure(ctx, env.JS, messaging.DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	kv, err := env.JS.KeyValue(ctx, messaging.BucketInstances)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, ok := rm.Instance("i-1"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the read model still serves the instances of the deleted bucket")
		}
	}
	t.Logf("the read model dropped the lost instances %v after the loss", time.Since(lost).Round(time.Millisecond))
	// Once the new bucket is noticed (within the watch's check interval),
	// read-your-writes waits for its revisions, not the old bucket's.
	b, _ := proto.Marshal(instance("g", "i-new", statev1.InstanceState_INSTANCE_STATE_PENDING))
	rev, err := kv.Create(ctx, messaging.InstanceKey("g", "i-new"), b)
	if err != nil {
		t.Fatal(err)
	}
	if err := rm.WaitFor(ctx, 0, rev); err != nil {
		t.Fatal(err)
	}
	if _, ok := rm.Instance("i-new"); !ok {
		t.Fatalf("the read model reached revision %d of the new bucket without its record", rev)
	}
	if n := rm.Stats().Instances; n != 1 {
		t.Errorf("%d instances in the read model, want the new one only", n)
	}
}

// The orphan hold lives under a reserved key of the groups bucket: the
// read model shows it and never takes it for a group.
func TestWatcherReadsTheOrphanHold(t *testing.T) {
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := env.JS.KeyValue(ctx, messaging.BucketGroups)
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	put := func(h messaging.OrphanHold) uint64 {
		b, err := messaging.MarshalOrphanHold(h)
		if err != nil {
			t.Fatal(err)
		}
		rev, err := kv.Put(ctx, messaging.KeyOrphanHold, b)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	put(messaging.OrphanHold{Since: since, Until: since.Add(24 * time.Hour), Held: map[string]int{"empty_start": 2}, Waiting: []string{"ins-a", "ins-b"}})
	rm := app.NewReadModel()
	startWatcher(t, gatewayJS(t, env), rm, nil)
	h, ok := rm.OrphanHold()
	if !ok || !h.Since.Equal(since) || len(h.Waiting) != 2 || !h.Holding(time.Now()) {
		t.Fatalf("orphan hold = %+v, %v", h, ok)
	}
	if len(rm.Groups()) != 0 {
		t.Errorf("the reserved key shows as a group: %+v", rm.Groups())
	}
	rev := put(messaging.OrphanHold{Since: since, Until: since.Add(24 * time.Hour), ReleasedAt: time.Now()})
	if err := rm.WaitFor(ctx, rev, 0); err != nil {
		t.Fatal(err)
	}
	if h, _ := rm.OrphanHold(); h.ReleasedAt.IsZero() || len(h.Waiting) != 0 {
		t.Errorf("after the release: %+v", h)
	}
}
