package messaging_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natstest"
)

func TestWatchKVMirrorsAndStops(t *testing.T) {
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := env.JS.KeyValue(ctx, messaging.BucketCatalog)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"hooks.a", "hooks.b", "templates.t"} {
		if _, err := kv.Put(ctx, k, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	mirror := map[string]bool{}
	syncedKeys := make(chan map[string]struct{}, 1)
	changed := make(chan struct{}, 10)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- messaging.WatchKV(wctx, env.JS, messaging.BucketCatalog, "hooks.>", 10*time.Millisecond, messaging.KVMirror{
			Apply: func(e jetstream.KeyValueEntry) {
				mu.Lock()
				defer mu.Unlock()
				if e.Operation() == jetstream.KeyValuePut {
					mirror[e.Key()] = true
				} else {
					delete(mirror, e.Key())
				}
				select {
				case changed <- struct{}{}:
				default:
				}
			},
			Synced: func(keys map[string]struct{}) { syncedKeys <- keys },
		})
	}()

	select {
	case keys := <-syncedKeys:
		if len(keys) != 2 {
			t.Fatalf("initial keys = %v, want the two hooks only (the filter)", keys)
		}
	case <-ctx.Done():
		t.Fatal("never synced")
	}
	if err := kv.Delete(ctx, "hooks.a"); err != nil {
		t.Fatal(err)
	}
	for {
		mu.Lock()
		_, present := mirror["hooks.a"]
		n := len(mirror)
		mu.Unlock()
		if !present && n == 1 {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("the delete never reached the mirror: %v", mirror)
		}
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("WatchKV returned %v after its context ended, want nil", err)
		}
	case <-ctx.Done():
		t.Fatal("WatchKV did not return after its context ended")
	}
}
