// Package natskv stores groups and instances in the NATS JetStream KV
// buckets declared by libs/messaging, as protobuf records, with
// compare-and-set on every write.
package natskv

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/protoconv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

var _ ports.Store = (*Store)(nil)

// Store is the ports.Store over the groups and instances buckets.
type Store struct {
	js        jetstream.JetStream
	groups    jetstream.KeyValue
	instances jetstream.KeyValue
	catalog   jetstream.KeyValue
	// markerTTL is the instances bucket's LimitMarkerTTL (messaging's
	// --js-kv-marker-ttl): how long the purge marker of a removed record
	// stays. Zero keeps markers (a bucket created without it).
	markerTTL time.Duration
}

// Open binds to the buckets (which messaging.Ensure creates).
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	g, err := js.KeyValue(ctx, messaging.BucketGroups)
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s: %w", messaging.BucketGroups, err)
	}
	i, err := js.KeyValue(ctx, messaging.BucketInstances)
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s: %w", messaging.BucketInstances, err)
	}
	c, err := js.KeyValue(ctx, messaging.BucketCatalog)
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s: %w", messaging.BucketCatalog, err)
	}
	st, err := i.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading bucket %s: %w", messaging.BucketInstances, err)
	}
	var markerTTL time.Duration
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		markerTTL = bs.LimitMarkerTTL()
	}
	return &Store{js: js, groups: g, instances: i, catalog: c, markerTTL: markerTTL}, nil
}

// Ping checks the instances bucket is reachable (readiness).
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.instances.Status(ctx)
	return err
}

// mapErr turns KV errors into the port's errors.
func mapErr(op, key string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return fmt.Errorf("%s %s: %w: %w", op, key, ports.ErrConflict, err)
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return fmt.Errorf("%s %s: %w", op, key, ports.ErrNotFound)
	}
	return fmt.Errorf("%s %s: %w", op, key, err)
}

// list returns the current value of every key, sorted by key, each made
// by decode from the value and its revision. The watcher's "initial
// values done" signals cannot be trusted while keys are being written: a
// key whose last value is superseded between the watch's start and its
// delivery is skipped and delivered only after the signal (a record
// missed at load would be re-created by the new leader). So the watched
// values are completed with the keys the stream holds once the watch is
// done (the server's own list of subjects), read one by one.
//
// Values are decoded as they arrive rather than kept as entries until the
// end: a new leader lists every instance, and holding every raw entry
// (message, buffer, entry) beside the decoded records raised its peak
// memory by about as much as the records themselves.
//
// Keys skip accepts are left out (the reserved keys of the groups bucket).
func list[V any](ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, skip func(key string) bool, decode func(value []byte, rev uint64) (V, error)) ([]V, error) {
	latest, gone, err := watchAll(ctx, kv, skip, decode)
	if err != nil {
		return nil, err
	}
	keys, err := streamKeys(ctx, js, kv.Bucket())
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if _, ok := latest[k]; ok || skip(k) {
			continue
		}
		if _, ok := gone[k]; ok {
			// The watch delivered the key's removal marker: nothing to
			// read. (Lifecycle never re-creates a removed key: instance
			// and group ids are new each time.)
			continue
		}
		e, err := kv.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
			continue
		case err != nil:
			return nil, fmt.Errorf("listing %s: reading %s: %w", kv.Bucket(), k, err)
		}
		latest[k] = decodeEntry(e, decode)
	}
	sorted := make([]string, 0, len(latest))
	for k := range latest {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	// Each value moves out of latest as it is copied: a map stores large
	// values out of line, so they are garbage one by one rather than all
	// beside out until the end (issue 20: the load's peak sets how far the
	// heap may grow before the next collection).
	out := make([]V, 0, len(sorted))
	for _, k := range sorted {
		d := latest[k]
		delete(latest, k)
		if d.err != nil {
			return nil, fmt.Errorf("decoding %s/%s: %w", kv.Bucket(), k, d.err)
		}
		out = append(out, d.v)
	}
	return out, nil
}

// noSkip lists every key.
func noSkip(string) bool { return false }

// decoded is a listed key's value, or why it could not be decoded (an
// error that matters only if no later value of the key replaces it).
type decoded[V any] struct {
	v   V
	err error
}

func decodeEntry[V any](e jetstream.KeyValueEntry, decode func([]byte, uint64) (V, error)) decoded[V] {
	v, err := decode(e.Value(), e.Revision())
	return decoded[V]{v: v, err: err}
}

// watchAll reads the bucket's values with a watcher until it says the
// initial values are delivered, keeping the latest value of each key,
// decoded, and the keys whose last message is a removal marker (gone). A
// bucket soon after a large scale-down holds a marker per removed record
// until the marker TTL passes: knowing them saves list a read per marker.
func watchAll[V any](ctx context.Context, kv jetstream.KeyValue, skip func(string) bool, decode func([]byte, uint64) (V, error)) (latest map[string]decoded[V], gone map[string]struct{}, err error) {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("listing %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	latest, gone = map[string]decoded[V]{}, map[string]struct{}{}
	for {
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("listing %s: %w", kv.Bucket(), ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, nil, fmt.Errorf("listing %s: watcher closed", kv.Bucket())
			}
			if e == nil {
				return latest, gone, nil
			}
			k := e.Key()
			if skip(k) {
				continue
			}
			if op := e.Operation(); op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge {
				delete(latest, k)
				gone[k] = struct{}{}
				continue
			}
			delete(gone, k)
			latest[k] = decodeEntry(e, decode)
		}
	}
}

// streamKeys lists the keys that have a message in the bucket's stream
// (deleted keys' markers included), from the server's subject index.
func streamKeys(ctx context.Context, js jetstream.JetStream, bucket string) ([]string, error) {
	stream, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", bucket, err)
	}
	prefix := "$KV." + bucket + "."
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", bucket, err)
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		keys = append(keys, strings.TrimPrefix(subj, prefix))
	}
	return keys, nil
}

// lastRevision returns the bucket's last sequence: the revision of a delete
// just made (lifecycle is the buckets' only writer).
func lastRevision(ctx context.Context, kv jetstream.KeyValue) uint64 {
	st, err := kv.Status(ctx)
	if err != nil {
		return 0
	}
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		return bs.StreamInfo().State.LastSeq
	}
	return 0
}

// ListGroups implements ports.Store.
func (s *Store) ListGroups(ctx context.Context) ([]ports.VersionedGroup, error) {
	return list(ctx, s.js, s.groups, messaging.IsReservedGroupKey, func(b []byte, rev uint64) (ports.VersionedGroup, error) {
		g, err := protoconv.UnmarshalGroup(b)
		return ports.VersionedGroup{Group: g, Revision: rev}, err
	})
}

// GetGroup implements ports.Store.
func (s *Store) GetGroup(ctx context.Context, id string) (ports.VersionedGroup, error) {
	e, err := s.groups.Get(ctx, id)
	if err != nil {
		return ports.VersionedGroup{}, mapErr("getting group", id, err)
	}
	g, err := protoconv.UnmarshalGroup(e.Value())
	if err != nil {
		return ports.VersionedGroup{}, fmt.Errorf("decoding group %s: %w", id, err)
	}
	return ports.VersionedGroup{Group: g, Revision: e.Revision()}, nil
}

// CreateGroup implements ports.Store.
func (s *Store) CreateGroup(ctx context.Context, g domain.NodeGroup) (uint64, error) {
	data, err := proto.Marshal(protoconv.GroupToProto(g))
	if err != nil {
		return 0, fmt.Errorf("encoding group %s: %w", g.ID, err)
	}
	rev, err := s.groups.Create(ctx, g.ID, data)
	return rev, mapErr("creating group", g.ID, err)
}

// UpdateGroup implements ports.Store.
func (s *Store) UpdateGroup(ctx context.Context, g domain.NodeGroup, revision uint64) (uint64, error) {
	data, err := proto.Marshal(protoconv.GroupToProto(g))
	if err != nil {
		return 0, fmt.Errorf("encoding group %s: %w", g.ID, err)
	}
	rev, err := s.groups.Update(ctx, g.ID, data, revision)
	return rev, mapErr("updating group", g.ID, err)
}

// DeleteGroup implements ports.Store.
func (s *Store) DeleteGroup(ctx context.Context, id string, revision uint64) (uint64, error) {
	if err := s.groups.Delete(ctx, id, jetstream.LastRevision(revision)); err != nil {
		return 0, mapErr("deleting group", id, err)
	}
	return lastRevision(ctx, s.groups), nil
}

// ListInstances implements ports.Store.
func (s *Store) ListInstances(ctx context.Context) ([]*ports.VersionedInstance, error) {
	// Each record is decoded into the allocation the caller keeps: list's
	// map and slice hold pointers, not copies.
	return list(ctx, s.js, s.instances, noSkip, func(b []byte, rev uint64) (*ports.VersionedInstance, error) {
		v := &ports.VersionedInstance{Revision: rev}
		var err error
		v.Instance, err = protoconv.UnmarshalInstance(b)
		return v, err
	})
}

// GetInstance implements ports.Store.
func (s *Store) GetInstance(ctx context.Context, group, id string) (ports.VersionedInstance, error) {
	key := messaging.InstanceKey(group, id)
	e, err := s.instances.Get(ctx, key)
	if err != nil {
		return ports.VersionedInstance{}, mapErr("getting instance", key, err)
	}
	i, err := protoconv.UnmarshalInstance(e.Value())
	if err != nil {
		return ports.VersionedInstance{}, fmt.Errorf("decoding instance %s: %w", key, err)
	}
	return ports.VersionedInstance{Instance: i, Revision: e.Revision()}, nil
}

// CreateInstance implements ports.Store.
func (s *Store) CreateInstance(ctx context.Context, i domain.Instance) (uint64, error) {
	key := messaging.InstanceKey(i.Group, i.ID)
	data, err := proto.Marshal(protoconv.InstanceToProto(i))
	if err != nil {
		return 0, fmt.Errorf("encoding instance %s: %w", key, err)
	}
	rev, err := s.instances.Create(ctx, key, data)
	return rev, mapErr("creating instance", key, err)
}

// UpdateInstance implements ports.Store.
func (s *Store) UpdateInstance(ctx context.Context, i domain.Instance, revision uint64) (uint64, error) {
	key := messaging.InstanceKey(i.Group, i.ID)
	data, err := proto.Marshal(protoconv.InstanceToProto(i))
	if err != nil {
		return 0, fmt.Errorf("encoding instance %s: %w", key, err)
	}
	rev, err := s.instances.Update(ctx, key, data, revision)
	return rev, mapErr("updating instance", key, err)
}

// DeleteInstance implements ports.Store. The record is purged, not
// deleted: a delete marker would stay in the bucket forever (one message per
// instance ever created), while a purge marker carries the bucket's marker
// TTL and the server removes it once every watcher (the gateway's read
// model) has had time to see the removal. A watcher that starts after that
// finds no key, which is what a removed record is.
func (s *Store) DeleteInstance(ctx context.Context, group, id string, revision uint64) (uint64, error) {
	key := messaging.InstanceKey(group, id)
	opts := []jetstream.KVDeleteOpt{jetstream.LastRevision(revision)}
	if s.markerTTL > 0 {
		opts = append(opts, jetstream.PurgeTTL(s.markerTTL))
	}
	if err := s.instances.Purge(ctx, key, opts...); err != nil {
		return 0, mapErr("deleting instance", key, err)
	}
	return lastRevision(ctx, s.instances), nil
}

var _ ports.HoldStore = (*Store)(nil)

// GetOrphanHold implements ports.HoldStore: the reserved key
// messaging.KeyOrphanHold of the groups bucket.
func (s *Store) GetOrphanHold(ctx context.Context) (ports.OrphanHold, uint64, error) {
	e, err := s.groups.Get(ctx, messaging.KeyOrphanHold)
	if err != nil {
		return ports.OrphanHold{}, 0, mapErr("getting", messaging.KeyOrphanHold, err)
	}
	h, err := messaging.UnmarshalOrphanHold(e.Value())
	if err != nil {
		return ports.OrphanHold{}, 0, fmt.Errorf("decoding %s: %w", messaging.KeyOrphanHold, err)
	}
	return ports.OrphanHold{
		Since: h.Since, Until: h.Until, InstancesBucket: h.InstancesBucket, HadRecords: h.HadRecords, ReleasedAt: h.ReleasedAt, Released: h.Released,
		Held: h.Held, Waiting: h.Waiting, UpdatedAt: h.UpdatedAt,
	}, e.Revision(), nil
}

// PutOrphanHold implements ports.HoldStore.
func (s *Store) PutOrphanHold(ctx context.Context, h ports.OrphanHold, revision uint64) (uint64, error) {
	data, err := messaging.MarshalOrphanHold(messaging.OrphanHold{
		Since: h.Since, Until: h.Until, InstancesBucket: h.InstancesBucket, HadRecords: h.HadRecords, ReleasedAt: h.ReleasedAt, Released: h.Released,
		Held: h.Held, Waiting: h.Waiting, UpdatedAt: h.UpdatedAt,
	})
	if err != nil {
		return 0, fmt.Errorf("encoding %s: %w", messaging.KeyOrphanHold, err)
	}
	var rev uint64
	if revision == 0 {
		rev, err = s.groups.Create(ctx, messaging.KeyOrphanHold, data)
	} else {
		rev, err = s.groups.Update(ctx, messaging.KeyOrphanHold, data, revision)
	}
	return rev, mapErr("writing", messaging.KeyOrphanHold, err)
}

// InstancesBucketID implements ports.HoldStore: the creation time of the
// instances bucket's stream, which a deleted and recreated bucket changes.
func (s *Store) InstancesBucketID(ctx context.Context) (string, error) {
	st, err := s.js.Stream(ctx, "KV_"+messaging.BucketInstances)
	if err != nil {
		return "", fmt.Errorf("reading the stream of %s: %w", messaging.BucketInstances, err)
	}
	return st.CachedInfo().Created.UTC().Format(time.RFC3339Nano), nil
}
