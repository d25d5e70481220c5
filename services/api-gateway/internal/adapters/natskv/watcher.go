// Package natskv feeds the gateway's read model from the NATS KV buckets
// lifecycle writes: one watch per bucket, initial values first (their end
// marks the model ready), then every put, delete and purge in revision
// order. A watch that ends while the service runs is re-established and
// converges the model with a fresh snapshot.
package natskv

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/bulkload"
	"github.com/nodesmith/nodesmith/libs/messaging"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/stateconv"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// Sink is what the watcher writes to; *app.ReadModel implements it.
type Sink interface {
	PutGroup(key string, rev uint64, rec *domain.NodeGroup)
	DeleteGroup(key string, rev uint64)
	PutInstance(key string, rev uint64, rec *domain.Instance)
	DeleteInstance(key string, rev uint64)
	PutCatalog(key string, rev uint64, rec *domain.CatalogEntry)
	DeleteCatalog(key string, rev uint64)
	PutOffering(key string, rev uint64, mark *domain.OfferingMark)
	DeleteOffering(key string, rev uint64)
	Skip(b app.Bucket, rev uint64)
	MarkSynced(b app.Bucket, seen map[string]struct{})
	SetOrphanHold(rev uint64, h *app.OrphanHold)
	ResetBucket(b app.Bucket)
}

var _ Sink = (*app.ReadModel)(nil)

// Metrics count what the watcher applies.
type Metrics struct {
	applied      *prometheus.CounterVec
	decodeErrors *prometheus.CounterVec
	restarts     *prometheus.CounterVec
	resets       *prometheus.CounterVec
}

// NewMetrics registers the watcher's metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_gateway_kv_updates_total",
			Help: "KV entries applied to the read model, by bucket and operation.",
		}, []string{"bucket", "op"}),
		decodeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_gateway_kv_decode_errors_total",
			Help: "KV values that could not be decoded and were skipped, by bucket.",
		}, []string{"bucket"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_gateway_kv_watch_restarts_total",
			Help: "KV watches re-established after they ended, by bucket.",
		}, []string{"bucket"}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_gateway_kv_bucket_resets_total",
			Help: "Buckets found deleted and recreated (state lost): the read model dropped what it held of them, by bucket.",
		}, []string{"bucket"}),
	}
	if reg != nil {
		reg.MustRegister(m.applied, m.decodeErrors, m.restarts, m.resets)
	}
	return m
}

// Watcher mirrors the groups, instances, catalog and offerings buckets
// into a Sink.
type Watcher struct {
	js      jetstream.JetStream
	sink    Sink
	log     *slog.Logger
	metrics *Metrics
	// endLoad ends the initial load's tight collection (set by Run).
	endLoad func()
}

// NewWatcher returns a Watcher; metrics may be nil.
func NewWatcher(js jetstream.JetStream, sink Sink, log *slog.Logger, metrics *Metrics) *Watcher {
	if log == nil {
		log = slog.Default()
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	return &Watcher{js: js, sink: sink, log: log, metrics: metrics}
}

// Run watches the groups, instances, catalog and offerings buckets until
// ctx ends; it returns nil then.
func (w *Watcher) Run(ctx context.Context) error {
	// The initial load of the instances bucket is the bulk of the read
	// model: the collector is kept tight until it is in (libs/bulkload).
	w.endLoad = sync.OnceFunc(bulkload.Begin())
	defer w.endLoad()
	errc := make(chan error, 4)
	go func() { errc <- w.watch(ctx, app.BucketGroups, messaging.BucketGroups) }()
	go func() { errc <- w.watch(ctx, app.BucketInstances, messaging.BucketInstances) }()
	go func() { errc <- w.watch(ctx, app.BucketCatalog, messaging.BucketCatalog) }()
	go func() { errc <- w.watch(ctx, app.BucketOfferings, messaging.BucketOfferings) }()
	return errors.Join(<-errc, <-errc, <-errc, <-errc)
}

func (w *Watcher) watch(ctx context.Context, b app.Bucket, bucket string) error {
	log := w.log.With("bucket", bucket)
	start := time.Now()
	return messaging.WatchKV(ctx, w.js, bucket, ">", 100*time.Millisecond, messaging.KVMirror{
		Apply: func(e jetstream.KeyValueEntry) { w.apply(b, e, log) },
		Synced: func(keys map[string]struct{}) {
			if _, ok := keys[messaging.KeyOrphanHold]; b == app.BucketGroups && !ok {
				w.sink.SetOrphanHold(0, nil) // deleted while no watch ran
			}
			w.sink.MarkSynced(b, keys)
			log.Info("kv initial values loaded", "keys", len(keys), "took", time.Since(start).Round(time.Millisecond))
			if b == app.BucketInstances {
				w.endLoad()
			}
			if len(keys) >= loadReleaseMin {
				releaseLoadGarbage()
			}
		},
		Restarting: func(err error, delay time.Duration) {
			w.metrics.restarts.WithLabelValues(b.String()).Inc()
			log.Warn("kv watch ended, re-establishing", "err", err, "in", delay)
			start = time.Now().Add(delay)
		},
		Reset: func() {
			w.metrics.resets.WithLabelValues(b.String()).Inc()
			log.Error("kv bucket was deleted and recreated (state lost): the read model forgets what it held of it and loads the new bucket")
			w.sink.ResetBucket(b)
		},
	})
}

// loadReleaseMin is the smallest initial load of a bucket after which the
// watcher collects (releaseLoadGarbage): below it the garbage is small.
const loadReleaseMin = 10_000

// releaseLoadGarbage collects and returns the freed memory to the OS
// after a bucket's initial values are loaded (issue 20). Decoding every
// record leaves its KV message, protobuf message and the watch's key set
// as garbage, but the collector set its next goal while the load was
// under way, and those pages stay resident until it gets there: at
// 100,000 instances RSS sat at ~2x the read model. One collection (~0.1 s
// there) sets the goal from the read model alone.
func releaseLoadGarbage() { debug.FreeOSMemory() }

func (w *Watcher) apply(b app.Bucket, e jetstream.KeyValueEntry, log *slog.Logger) {
	key, rev := e.Key(), e.Revision()
	if b == app.BucketGroups && messaging.IsReservedGroupKey(key) {
		w.applyReserved(e, log)
		return
	}
	if op := e.Operation(); op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge {
		w.metrics.applied.WithLabelValues(b.String(), "delete").Inc()
		switch b {
		case app.BucketGroups:
			w.sink.DeleteGroup(key, rev)
		case app.BucketCatalog:
			w.sink.DeleteCatalog(key, rev)
		case app.BucketOfferings:
			w.sink.DeleteOffering(key, rev)
		default:
			w.sink.DeleteInstance(key, rev)
		}
		return
	}
	var err error
	switch b {
	case app.BucketGroups:
		rec := &statev1.NodeGroup{}
		if err = proto.Unmarshal(e.Value(), rec); err == nil {
			w.sink.PutGroup(key, rev, stateconv.Group(rec))
		}
	case app.BucketInstances:
		rec := &statev1.Instance{}
		if err = proto.Unmarshal(e.Value(), rec); err == nil {
			w.sink.PutInstance(key, rev, stateconv.Instance(rec))
		}
	case app.BucketCatalog:
		rec := &statev1.CatalogEntry{}
		if err = proto.Unmarshal(e.Value(), rec); err == nil {
			w.sink.PutCatalog(key, rev, stateconv.CatalogEntry(rec))
		}
	case app.BucketOfferings:
		rec := &cloudv1.OfferingUnavailable{}
		if err = proto.Unmarshal(e.Value(), rec); err == nil {
			mark := stateconv.OfferingMark(rec)
			if r := mark.Ref; messaging.OfferingKey(r.Provider, r.Account, r.Region, r.Zone, r.InstanceType, r.CapacityType) != key {
				// Views match marks by the offering they name; adapters
				// skip by key. A writer bug would show here first.
				log.Warn("offerings mark is stored under another offering's key", "key", key, "revision", rev,
					"provider", r.Provider, "account", r.Account, "region", r.Region, "zone", r.Zone,
					"instance_type", r.InstanceType, "capacity_type", r.CapacityType)
			}
			w.sink.PutOffering(key, rev, mark)
		}
	}
	if err != nil {
		// Keep the last good value: a record we cannot read is a bug in
		// a writer, and forgetting the instance would hide a VM from CA.
		w.metrics.decodeErrors.WithLabelValues(b.String()).Inc()
		log.Error("skipping undecodable kv value", "key", key, "revision", rev, "err", err)
		w.sink.Skip(b, rev)
		return
	}
	w.metrics.applied.WithLabelValues(b.String(), "put").Inc()
}

// applyReserved applies a reserved key of the groups bucket: the orphan
// hold; other reserved keys (a later version's) are skipped.
func (w *Watcher) applyReserved(e jetstream.KeyValueEntry, log *slog.Logger) {
	key, rev := e.Key(), e.Revision()
	if key != messaging.KeyOrphanHold {
		w.sink.Skip(app.BucketGroups, rev)
		return
	}
	if op := e.Operation(); op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge {
		w.sink.SetOrphanHold(rev, nil)
		return
	}
	h, err := messaging.UnmarshalOrphanHold(e.Value())
	if err != nil {
		w.metrics.decodeErrors.WithLabelValues(app.BucketGroups.String()).Inc()
		log.Error("skipping undecodable kv value", "key", key, "revision", rev, "err", err)
		w.sink.Skip(app.BucketGroups, rev)
		return
	}
	w.metrics.applied.WithLabelValues(app.BucketGroups.String(), "put").Inc()
	w.sink.SetOrphanHold(rev, &app.OrphanHold{
		Since: h.Since, Until: h.Until, ReleasedAt: h.ReleasedAt,
		Held: h.Held, Waiting: h.Waiting, UpdatedAt: h.UpdatedAt,
	})
}
