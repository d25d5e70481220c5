package messaging

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/backoff"
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
	// Reset is called when the bucket turns out to be another one than
	// the mirror holds (deleted and recreated: its revisions start over):
	// the mirror must forget everything it holds, revisions included,
	// before the new bucket's initial values arrive.
	Reset func()
	// CheckEvery is how often a running watch checks that its bucket
	// still exists and is the same one (0: DefaultKVCheckEvery). A watch
	// does not notice by itself: its consumer vanishes with the deleted
	// bucket and is recreated on the new one at the old sequence, where
	// it waits, quiet, for revisions the new bucket will take long to
	// reach, while the mirror serves the lost records.
	CheckEvery time.Duration
}

// DefaultKVCheckEvery is KVMirror.CheckEvery's default.
const DefaultKVCheckEvery = 5 * time.Second

// errBucketChanged ends a watch whose bucket was deleted or recreated.
var errBucketChanged = errors.New("bucket deleted or recreated")

// WatchKV mirrors the keys of bucket matching filter (">" for all) into m
// until ctx ends, then returns nil. A watch that ends while ctx lives (a
// NATS restart, a lost connection) is re-established with jittered
// exponential backoff from minBackoff (reset once a watch has synced) to
// 10s, and converges the mirror with a fresh snapshot. A bucket deleted
// and recreated (state lost) is noticed within m.CheckEvery: the mirror
// is Reset and fed the new bucket.
func WatchKV(ctx context.Context, js jetstream.JetStream, bucket, filter string, minBackoff time.Duration, m KVMirror) error {
	b := backoff.Policy{Initial: minBackoff, Max: 10 * time.Second}.New()
	if m.CheckEvery <= 0 {
		m.CheckEvery = DefaultKVCheckEvery
	}
	// identity is the bucket the mirror holds (its stream's creation
	// time); zero until the first watch opened it.
	var identity time.Time
	for {
		err := watchKVOnce(ctx, js, bucket, filter, m, &identity, b.Reset)
		if ctx.Err() != nil {
			return nil //nolint:nilerr // the watch ended because we are stopping
		}
		delay := b.Next()
		if m.Restarting != nil {
			m.Restarting(err, delay)
		} else {
			slog.Warn("kv watch ended, re-establishing", "bucket", bucket, "err", err, "in", delay)
		}
		if backoff.Wait(ctx, delay) != nil {
			return nil //nolint:nilerr // the wait ended because we are stopping
		}
	}
}

// bucketIdentity returns when bucket's stream was created, which tells a
// recreated bucket from the one before.
func bucketIdentity(ctx context.Context, kv jetstream.KeyValue) (time.Time, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return time.Time{}, err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return time.Time{}, errors.New("no stream info in the bucket status")
	}
	return bs.StreamInfo().Created, nil
}

func watchKVOnce(ctx context.Context, js jetstream.JetStream, bucket, filter string, m KVMirror, identity *time.Time, synced func()) error {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return fmt.Errorf("opening bucket %s: %w", bucket, err)
	}
	created, err := bucketIdentity(ctx, kv)
	if err != nil {
		return fmt.Errorf("reading the status of bucket %s: %w", bucket, err)
	}
	if !identity.IsZero() && !created.Equal(*identity) {
		slog.Warn("kv bucket was recreated: forgetting what the mirror held", "bucket", bucket,
			"created", created, "previous", *identity)
		if m.Reset != nil {
			m.Reset()
		}
	}
	*identity = created
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
	check := time.NewTicker(m.CheckEvery)
	defer check.Stop()
	seen := map[string]struct{}{}
	for {
		var e jetstream.KeyValueEntry
		var open bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-check.C:
			c, err := bucketIdentity(ctx, kv)
			switch {
			case errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrBucketNotFound):
				return fmt.Errorf("bucket %s: %w: %w", bucket, errBucketChanged, err)
			case err == nil && !c.Equal(created):
				return fmt.Errorf("bucket %s: %w", bucket, errBucketChanged)
			}
			// Other errors (NATS unreachable) are the watch's to notice.
			continue
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
