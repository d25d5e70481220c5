package natskv

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/protoconv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

var _ ports.InstanceFeed = (*Store)(nil)

// instancesStream returns the instances bucket's stream identity (its
// creation time, as InstancesBucketID) and last sequence, fresh.
func (s *Store) instancesStream(ctx context.Context) (ports.FeedPos, error) {
	st, err := s.js.Stream(ctx, "KV_"+messaging.BucketInstances)
	if err != nil {
		return ports.FeedPos{}, fmt.Errorf("reading the stream of %s: %w", messaging.BucketInstances, err)
	}
	info := st.CachedInfo()
	return ports.FeedPos{Store: info.Created.UTC().Format(time.RFC3339Nano), Rev: info.State.LastSeq}, nil
}

// InstancesPos implements ports.InstanceFeed.
func (s *Store) InstancesPos(ctx context.Context) (ports.FeedPos, error) {
	return s.instancesStream(ctx)
}

// InstancesSince implements ports.InstanceFeed: a watcher from pos.Rev+1
// reads the latest message of every key written since (the bucket keeps
// one per key), until it says the values are delivered. The position
// returned is the stream's last sequence read before the watch: a key
// superseded while the watch runs may be delivered only after that
// signal, but its new value is past the returned position, so the next
// call reads it.
func (s *Store) InstancesSince(ctx context.Context, pos ports.FeedPos) (ports.InstanceChanges, error) {
	cur, err := s.instancesStream(ctx)
	if err != nil {
		return ports.InstanceChanges{}, err
	}
	if cur.Store != pos.Store || cur.Rev < pos.Rev {
		return ports.InstanceChanges{}, fmt.Errorf("instances from revision %d: %w", pos.Rev, ports.ErrFeedGap)
	}
	out := ports.InstanceChanges{Removed: map[string]uint64{}, Pos: cur}
	if cur.Rev == pos.Rev {
		return out, nil
	}
	w, err := s.instances.WatchAll(ctx, jetstream.ResumeFromRevision(pos.Rev+1))
	if err != nil {
		return ports.InstanceChanges{}, fmt.Errorf("watching %s: %w", messaging.BucketInstances, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return ports.InstanceChanges{}, fmt.Errorf("watching %s: %w", messaging.BucketInstances, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return ports.InstanceChanges{}, fmt.Errorf("watching %s: watcher closed", messaging.BucketInstances)
			}
			if e == nil {
				return out, nil
			}
			if op := e.Operation(); op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge {
				_, id, ok := strings.Cut(e.Key(), ".")
				if !ok {
					return ports.InstanceChanges{}, fmt.Errorf("watching %s: key %q is not <group>.<id>", messaging.BucketInstances, e.Key())
				}
				out.Removed[id] = e.Revision()
				continue
			}
			in, err := protoconv.UnmarshalInstance(e.Value())
			if err != nil {
				return ports.InstanceChanges{}, fmt.Errorf("decoding %s/%s: %w", messaging.BucketInstances, e.Key(), err)
			}
			out.Changed = append(out.Changed, ports.VersionedInstance{Instance: in, Revision: e.Revision()})
		}
	}
}

// RemovalsKept implements ports.InstanceFeed: the purge marker's TTL.
func (s *Store) RemovalsKept() time.Duration { return s.markerTTL }
