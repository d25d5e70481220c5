package natskv_test

import (
	"context"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/metrics/metricstest"
	"github.com/nodesmith/nodesmith/libs/providerid"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/natskv"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/fakelifecycle"
)

func instance(group, id string, st statev1.InstanceState) *statev1.Instance {
	return &statev1.Instance{Id: id, Group: group, State: st, ProviderId: providerid.Placeholder(group, id)}
}

// startWatcher runs a watcher into rm until the test ends (or stop is
// called) and waits for the initial values.
func startWatcher(t *testing.T, js jetstream.JetStream, rm *app.ReadModel, m *natskv.Metrics) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- natskv.NewWatcher(js, rm, nil, m).Run(ctx) }()
	stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watcher: %v", err)
		}
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := rm.WaitFor(wctx, 0, 0); err != nil {
		t.Fatalf("read model never synced: %v", err)
	}
	return stop
}

func TestWatcherMirrorsBuckets(t *testing.T) {
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := fakelifecycle.NewStore(ctx, env.Conn, env.JS)
	if err != nil {
		t.Fatal(err)
	}
	must := func(rev uint64, err error) uint64 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	// Written before the gateway starts: the initial values.
	must(store.PutGroup(ctx, &statev1.NodeGroup{Id: "web", MaxSize: 5, TargetSize: 2}))
	must(store.PutInstance(ctx, instance("web", "i-1", statev1.InstanceState_INSTANCE_STATE_RUNNING)))
	must(store.PutInstance(ctx, instance("web", "i-2", statev1.InstanceState_INSTANCE_STATE_PENDING)))

	reg := prometheus.NewRegistry()
	metrics := natskv.NewMetrics(reg)
	rm := app.NewReadModel()
	startWatcher(t, gatewayJS(t, env), rm, metrics)

	if g, ok := rm.Group("web"); !ok || g.Record.TargetSize != 2 {
		t.Fatalf("initial group: %+v %v", g.Record, ok)
	}
	if n := len(rm.GroupInstances("web", nil)); n != 2 {
		t.Fatalf("initial instances: %d", n)
	}

	// Later writes, deletes and purges arrive in order; WaitFor on the
	// revision a write returned is the read-your-writes primitive.
	instKV, _ := env.JS.KeyValue(ctx, messaging.BucketInstances)
	groupKV, _ := env.JS.KeyValue(ctx, messaging.BucketGroups)
	gRev := must(store.PutGroup(ctx, &statev1.NodeGroup{Id: "web", MaxSize: 5, TargetSize: 3}))
	upd := instance("web", "i-2", statev1.InstanceState_INSTANCE_STATE_CREATING)
	upd.ProviderId = "tencentcloud:///ap-1/ins-2"
	must(store.PutInstance(ctx, upd))
	if err := instKV.Delete(ctx, "web.i-1"); err != nil {
		t.Fatal(err)
	}
	iRev := must(store.PutInstance(ctx, instance("web", "i-3", statev1.InstanceState_INSTANCE_STATE_PENDING)))
	if err := rm.WaitFor(ctx, gRev, iRev); err != nil {
		t.Fatal(err)
	}
	if g, _ := rm.Group("web"); g.Record.TargetSize != 3 || g.Revision != gRev {
		t.Errorf("group after update: target %d rev %d (want 3, %d)", g.Record.TargetSize, g.Revision, gRev)
	}
	if _, ok := rm.Instance("i-1"); ok {
		t.Error("deleted instance i-1 still present")
	}
	if g, ok := rm.GroupForNode("tencentcloud:///ap-1/ins-2", ""); !ok || g.Record.ID != "web" {
		t.Error("updated provider id not indexed")
	}

	// Purge, and an undecodable value: the revision still advances (no
	// waiter hangs) and the last good value is kept.
	if err := instKV.Purge(ctx, "web.i-3"); err != nil {
		t.Fatal(err)
	}
	bad := must(groupKV.Put(ctx, "web", []byte{0xff, 0xff, 0xff}))
	if err := rm.WaitFor(ctx, bad, lastRevision(t, ctx, instKV)); err != nil {
		t.Fatal(err)
	}
	if _, ok := rm.Instance("i-3"); ok {
		t.Error("purged instance i-3 still present")
	}
	if g, _ := rm.Group("web"); g.Record.TargetSize != 3 {
		t.Errorf("undecodable value replaced the group: %+v", g.Record)
	}
	if n := metricstest.Sum(t, reg, "nodesmith_gateway_kv_decode_errors_total", nil); n != 1 {
		t.Errorf("decode errors metric = %v, want 1", n)
	}
}

func lastRevision(t *testing.T, ctx context.Context, kv jetstream.KeyValue) uint64 {
	t.Helper()
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
}

func TestWatcherEmptyBucketsAreSynced(t *testing.T) {
	env := natstest.Start(t)
	rm := app.NewReadModel()
	startWatcher(t, gatewayJS(t, env), rm, nil)
	if !rm.Synced() {
		t.Fatal("empty buckets did not sync")
	}
}

// A gateway restarted on an existing model (a re-established watch)
// converges even when a key vanished without a trace while it was away.
func TestWatcherResyncConverges(t *testing.T) {
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := fakelifecycle.NewStore(ctx, env.Conn, env.JS)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"i-1", "i-2"} {
		if _, err := store.PutInstance(ctx, instance("g", id, statev1.InstanceState_INSTANCE_STATE_RUNNING)); err != nil {
			t.Fatal(err)
		}
	}
	rm := app.NewReadModel()
	stop := startWatcher(t, gatewayJS(t, env), rm, nil)
	stop()

	// Purging the delete markers is no service's right: the test admin does.
	_, admin := env.ConnectAdmin(t)
	kv, _ := admin.KeyValue(ctx, messaging.BucketInstances)
	if err := kv.Purge(ctx, "g.i-1"); err != nil {
		t.Fatal(err)
	}
	// Remove even the purge marker: nothing in the stream mentions i-1.
	if err := kv.PurgeDeletes(ctx, jetstream.DeleteMarkersOlderThan(-1)); err != nil {
		t.Fatal(err)
	}
	// The model was synced before, so wait for the new watch's snapshot
	// by polling for its effect.
	startWatcher(t, gatewayJS(t, env), rm, nil)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := rm.Instance("i-1"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("instance purged while the watch was down is still in the model")
		}
	}
	if _, ok := rm.Instance("i-2"); !ok {
		t.Fatal("instance i-2 lost in the resync")
	}
}

// The catalog bucket is mirrored too: initial values, puts, deletes, and
// WaitForCatalog for read-your-writes.
func TestWatcherMirrorsTheCatalog(t *testing.T) {
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := env.JS.KeyValue(ctx, messaging.BucketCatalog)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string, e *statev1.CatalogEntry) uint64 {
		t.Helper()
		data, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		rev, err := kv.Put(ctx, key, data)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	hookKey := messaging.CatalogKey(messaging.CatalogKeyHook, "join")
	put(hookKey, &statev1.CatalogEntry{Entry: &statev1.CatalogEntry_Hook{Hook: &statev1.HookSpec{Name: "join", Script: "v1"}}})
	rm := app.NewReadModel()
	startWatcher(t, gatewayJS(t, env), rm, nil)
	if err := rm.WaitForCatalog(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if v, ok := rm.CatalogEntry(app.CatalogKey(app.KindHooks, "join")); !ok || v.Entry.Hook == nil || v.Entry.Hook.Script != "v1" {
		t.Fatalf("initial hook: %+v, %v (app and messaging keys must agree)", v, ok)
	}
	rev := put(messaging.CatalogKey(messaging.CatalogKeyTemplate, "big"), &statev1.CatalogEntry{Entry: &statev1.CatalogEntry_Template{Template: &statev1.InstanceTemplate{Name: "big"}}})
	if err := rm.WaitForCatalog(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if _, ok := rm.CatalogEntry(app.CatalogKey(app.KindTemplates, "big")); !ok {
		t.Fatal("the put template is not mirrored")
	}
	if err := kv.Delete(ctx, hookKey); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, ok := rm.CatalogEntry(app.CatalogKey(app.KindHooks, "join")); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the deleted hook is still mirrored")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := rm.Catalog(app.KindTemplates + "."); len(got) != 1 {
		t.Errorf("Catalog(templates) = %d entries", len(got))
	}
}

// gatewayJS connects as the api-gateway, the identity that watches KV.
func gatewayJS(t *testing.T, env *natstest.Env) jetstream.JetStream {
	t.Helper()
	_, js := env.ConnectAs(t, natsauth.APIGateway)
	return js
}

// The offerings bucket is mirrored too: a mark written before the watch
// (initial values) and after it, a delete, and an undecodable value that
// is skipped without hiding the last good one.
func TestWatcherMirrorsOfferingMarks(t *testing.T) {
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := env.JS.KeyValue(ctx, messaging.BucketOfferings)
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	put := func(zone string, value []byte) (string, uint64) {
		t.Helper()
		key := messaging.OfferingKey("tencentcloud", "prod", "ap-guangzhou", zone, "S5.LARGE8", "spot")
		if value == nil {
			value, err = proto.Marshal(&cloudv1.OfferingUnavailable{
				Target:   &cloudv1.Target{Provider: "tencentcloud", Account: "prod", Region: "ap-guangzhou"},
				Offering: &cloudv1.Offering{Zone: zone, InstanceType: "S5.LARGE8", CapacityType: "spot"},
				Until:    timestamppb.New(until), Reason: &cloudv1.CloudError{Code: "SOLD_OUT", Message: zone},
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		rev, err := kv.Put(ctx, key, value)
		if err != nil {
			t.Fatal(err)
		}
		return key, rev
	}
	ref := func(zone string) domain.OfferingRef {
		return domain.OfferingRef{Provider: "tencentcloud", Account: "prod", Region: "ap-guangzhou", Zone: zone, InstanceType: "S5.LARGE8", CapacityType: "spot"}
	}
	key3, _ := put("gz-3", nil)

	reg := prometheus.NewRegistry()
	rm := app.NewReadModel()
	startWatcher(t, gatewayJS(t, env), rm, natskv.NewMetrics(reg))
	if err := rm.WaitForOfferings(ctx, 0); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if m, ok := rm.OfferingMark(ref("gz-3"), now); !ok || !m.Until.Equal(until) || m.Code != "SOLD_OUT" || m.Message != "gz-3" {
		t.Fatalf("initial mark: %+v, %v", m, ok)
	}
	_, rev := put("gz-4", nil)
	if err := rm.WaitForOfferings(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if _, ok := rm.OfferingMark(ref("gz-4"), now); !ok {
		t.Fatal("a mark put after the watch started is not mirrored")
	}
	if err := kv.Delete(ctx, key3); err != nil {
		t.Fatal(err)
	}
	_, rev = put("gz-4", []byte{0xff, 0xff})
	if err := rm.WaitForOfferings(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if _, ok := rm.OfferingMark(ref("gz-3"), now); ok {
		t.Error("a deleted mark is still mirrored")
	}
	if _, ok := rm.OfferingMark(ref("gz-4"), now); !ok {
		t.Error("an undecodable value replaced the last good mark")
	}
	if n := metricstest.Sum(t, reg, "nodesmith_gateway_kv_decode_errors_total", map[string]string{"bucket": "offerings"}); n != 1 {
		t.Errorf("offerings decode errors = %v, want 1", n)
	}
	if live := rm.OfferingMarks(now); len(live) != 1 {
		t.Errorf("%d live marks, want 1", len(live))
	}
}
