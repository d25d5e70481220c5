package messaging_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natstest"
)

// TestWatchKVAfterHistoryDeliversLiveKeysOnly pins issue 20's B6: a bucket
// that has seen many records removed as lifecycle removes one (a purge
// marker with a TTL, long expired) costs a new watch nothing per removed
// record: the initial values are the live keys, one entry each, no
// removal among them.
func TestWatchKVAfterHistoryDeliversLiveKeysOnly(t *testing.T) {
	const live, removed = 20, 300
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kv, err := env.JS.KeyValue(ctx, messaging.BucketInstances)
	if err != nil {
		t.Fatal(err)
	}
	for i := range removed {
		key := messaging.InstanceKey("g", fmt.Sprintf("gone-%04d", i))
		rev, err := kv.Create(ctx, key, []byte("record"))
		if err != nil {
			t.Fatal(err)
		}
		if i%(removed/live) == 0 {
			// Live records spread through the history, as months of
			// churn leave them.
			if _, err := kv.Create(ctx, messaging.InstanceKey("g", fmt.Sprintf("live-%04d", i)), []byte("record")); err != nil {
				t.Fatal(err)
			}
		}
		if err := kv.Purge(ctx, key, jetstream.LastRevision(rev), jetstream.PurgeTTL(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	stream, err := env.JS.Stream(ctx, "KV_"+messaging.BucketInstances)
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == live {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the stream holds %d messages, want the %d live records once the markers expire", info.State.Msgs, live)
		case <-time.After(100 * time.Millisecond):
		}
	}

	var mu sync.Mutex
	var puts, removals int
	synced := make(chan map[string]struct{}, 1)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_ = messaging.WatchKV(wctx, env.JS, messaging.BucketInstances, ">", 10*time.Millisecond, messaging.KVMirror{
			Apply: func(e jetstream.KeyValueEntry) {
				mu.Lock()
				defer mu.Unlock()
				if e.Operation() == jetstream.KeyValuePut {
					puts++
				} else {
					removals++
				}
			},
			Synced: func(keys map[string]struct{}) { synced <- keys },
		})
	}()
	select {
	case keys := <-synced:
		mu.Lock()
		defer mu.Unlock()
		if len(keys) != live || puts != live || removals != 0 {
			t.Fatalf("initial values: %d keys, %d puts, %d removals; want %d, %d, 0 (nothing per removed record)", len(keys), puts, removals, live, live)
		}
		for k := range keys {
			if k[:len("g.live-")] != "g.live-" {
				t.Errorf("initial key %q is not a live record", k)
			}
		}
	case <-ctx.Done():
		t.Fatal("never synced")
	}
}
