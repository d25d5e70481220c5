package messaging

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// KVMirror is what WatchKV feeds: a local copy of (part of) a bucket.
type KVMirror struct {
	// Apply receives every entry in revision order: the initial values,
	// then every put, delete and purge (check e.Operation()).
	Apply func(e jetstream.KeyValueEntry)
	// Synced is called after the initial values of each watch with the
	// keys they held: the mirror drops what is not among them (deleted
	// while no watch ran). The first call means the mirror is complete.
	Synced func(keys map[string]struct{})
	// Restarting, optional, is called before a watch that ended is
	// re-established after delay (for logs and metrics).
	Restarting func(err error, delay time.Duration)
}

// WatchKV mirrors the keys of bucket matching filter (">" for all) into m
// until ctx ends, then returns nil. A watch that ends while ctx lives (a
// NATS restart, a lost connection) is re-established with jittered
// exponential backoff from minBackoff (reset once a watch has synced) to
// 10s, and converges the mirror with a fresh snapshot.
func WatchKV(ctx context.Context, js jetstream.JetStream, bucket, filter string, minBackoff time.Duration, m KVMirror) error {
	backoff := minBackoff
	for {
		err := watchKVOnce(ctx, js, bucket, filter, m, func() { backoff = minBackoff })
		if ctx.Err() != nil {
			return nil //nolint:nilerr // the watch ended because we are stopping
		}
		delay := backoff/2 + rand.N(backoff/2+1)
		if m.Restarting != nil {
			m.Restarting(err, delay)
		} else {
			slog.Warn("kv watch ended, re-establishing", "bucket", bucket, "err", err, "in", delay)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func watchKVOnce(ctx context.Context, js jetstream.JetStream, bucket, filter string, m KVMirror, synced func()) error {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return fmt.Errorf("opening bucket %s: %w", bucket, err)
	}
	// Deletes and purges are delivered too (no IgnoreDeletes): the mirror
	// must forget them.
	kw, err := kv.Watch(ctx, filter)
	if err != nil {
		return fmt.Errorf("watching bucket %s: %w", bucket, err)
	}
	defer func() {
		if ctx.Err() != nil {
			// Stopping: Stop can wait for NATS (up to a request timeout
			// while disconnected); the service's shutdown must not.
			go func() { _ = kw.Stop() }()
			return
		}
		_ = kw.Stop()
	}()
	seen := map[string]struct{}{}
	for {
		var e jetstream.KeyValueEntry
		var open bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, open = <-kw.Updates():
		}
		if !open {
			return errors.New("watch closed")
		}
		if e == nil { // the end of the initial values
			m.Synced(seen)
			seen = nil
			synced()
			continue
		}
		if seen != nil {
			seen[e.Key()] = struct{}{}
		}
		m.Apply(e)
	}
}
