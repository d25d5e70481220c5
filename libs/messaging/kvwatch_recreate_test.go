package messaging_test

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natstest"
)

// State loss: the instances bucket is deleted under a running watch and
// recreated (lifecycle's start ensures the topology again), with fewer
// and other records, at revisions lower than the mirror has seen. The
// watch must notice, tell the mirror to forget the lost bucket, and
// mirror the new one; it must not go quiet and keep the lost records.
func TestWatchKVFollowsARecreatedBucket(t *testing.T) {
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bucket := messaging.BucketInstances
	kv, err := env.JS.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"g.a", "g.b", "g.c", "g.d"} {
		for range 3 { // revisions well above what the new bucket reaches
			if _, err := kv.Put(ctx, k, []byte("old")); err != nil {
				t.Fatal(err)
			}
		}
	}

	var mu sync.Mutex
	mirror := map[string]string{}
	resets := 0
	go func() {
		_ = messaging.WatchKV(ctx, env.JS, bucket, ">", 10*time.Millisecond, messaging.KVMirror{
			Apply: func(e jetstream.KeyValueEntry) {
				mu.Lock()
				defer mu.Unlock()
				if e.Operation() == jetstream.KeyValuePut {
					mirror[e.Key()] = string(e.Value())
				} else {
					delete(mirror, e.Key())
				}
			},
			Synced: func(keys map[string]struct{}) {
				mu.Lock()
				defer mu.Unlock()
				for k := range mirror {
					if _, ok := keys[k]; !ok {
						delete(mirror, k)
					}
				}
			},
			CheckEvery: 200 * time.Millisecond,
			Reset: func() {
				mu.Lock()
				defer mu.Unlock()
				resets++
				clear(mirror)
			},
		})
	}()
	wait := func(what string, want map[string]string) {
		t.Helper()
		for {
			mu.Lock()
			ok := maps.Equal(mirror, want)
			got := maps.Clone(mirror)
			mu.Unlock()
			if ok {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: the mirror holds %v, want %v", what, got, want)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	wait("initial values", map[string]string{"g.a": "old", "g.b": "old", "g.c": "old", "g.d": "old"})

	start := time.Now()
	_, admin := env.ConnectAdmin(t) // losing state is no service's right
	if err := admin.DeleteKeyValue(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	if err := messaging.Ensure(ctx, env.JS, messaging.DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	kv, err = env.JS.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "g.a", []byte("new")); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "g.e", []byte("new")); err != nil {
		t.Fatal(err)
	}
	wait("after the bucket was recreated", map[string]string{"g.a": "new", "g.e": "new"})
	t.Logf("the mirror followed the recreated bucket %v after its deletion", time.Since(start).Round(time.Millisecond))
	// And it keeps following it.
	if _, err := kv.Put(ctx, "g.f", []byte("new")); err != nil {
		t.Fatal(err)
	}
	wait("a later put", map[string]string{"g.a": "new", "g.e": "new", "g.f": "new"})
	mu.Lock()
	defer mu.Unlock()
	if resets != 1 {
		t.Errorf("Reset called %d times, want once", resets)
	}
	_ = slices.Sorted(maps.Keys(mirror))
}
