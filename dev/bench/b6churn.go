package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
	"github.com/nodesmith/nodesmith/libs/messaging"
)

// B6's real churn (-b6-real-churn): create/delete cycles through the
// services, in b6ChurnGroups groups of b6ChurnLive/b6ChurnGroups live
// instances, b6ChurnBatch cycles per group and round.
const (
	b6ChurnGroups = 10
	b6ChurnLive   = 1000
	b6ChurnBatch  = 50
	// b6ChurnRetention and b6ChurnMarkerTTL stand for lifecycle's
	// --deleted-retention (15 days) and the bucket's marker TTL (30
	// minutes) long past, as the synthetic store's 1 s markers do.
	b6ChurnRetention = 5 * time.Second
	b6ChurnMarkerTTL = harness.ChurnMarkerTTL
	// b6ShapeGoal: the real store's instances bucket is within 10% of the
	// synthetic one holding the same live records, and does not grow by
	// more than that with the cycles.
	b6ShapeGoal = 0.10
	// b6KVBlock is JetStream's file block size of a KV bucket's stream
	// (nats-server's defaultKVBlockSize).
	b6KVBlock = 4 << 20
	// b6PurgePerSecond is the pace of lifecycle's purge once a backlog
	// is past the retention: its batch (100) per pass, a pass per tick.
	b6PurgePerSecond = 100
)

// b6Checkpoint is the store after some cycles, before the retention.
type b6Checkpoint struct {
	cycles      int
	instBytes   uint64
	instMsgs    uint64
	instDisk    int64
	deletedKept int
	// purgedIn is from the last cycle to every Deleted record purged.
	purgedIn time.Duration
}

// b6Store is one store's shape.
type b6Store struct {
	storage  harness.Storage
	instDisk int64
	shape    harness.RecordShape
	streams  map[string]uint64
}

// runB6RealChurn drives cycles create/delete cycles through the four
// services (gateway gRPC IncreaseSize and DeleteNodes as CA makes them,
// lifecycle, the cloud adapter, the zero-latency emulator, no hooks), lets
// the retention and the markers' TTL pass, and measures the store as B6
// measures the synthetic one. Beside it: the synthetic store built from
// the same live records (and groups) with the same number of removed
// instances written straight onto the bucket, and those live records
// alone.
func runB6RealChurn(ctx context.Context, e *env, cycles int) error {
	live := b6ChurnLive
	if e.quick {
		live = 200
	}
	perGroup := live / b6ChurnGroups
	batch := min(b6ChurnBatch, perGroup)
	size := fmt.Sprintf("real churn: %s live, %s cycles", count(live), count(cycles))
	add := func(r Result) { r.Scenario = "B6"; r.Size = size; e.report.add(r) }

	dir, err := e.scratch("b6churn")
	if err != nil {
		return err
	}
	var groups []string
	for g := range b6ChurnGroups {
		groups = append(groups, fmt.Sprintf("churn-%02d", g))
	}
	cs, err := harness.StartChurnStack(ctx, harness.ChurnStackConfig{Dir: dir, Groups: groups, MaxSize: perGroup + batch,
		Retention: b6ChurnRetention, MarkerTTL: b6ChurnMarkerTTL, NATSSync: b6Sync, Logger: e.log})
	if err != nil {
		return err
	}
	defer cs.Close()
	lc := cs.Stack.Registries["lifecycle"]
	ch := cs.Churn(groups, perGroup, batch, 5*time.Minute)
	if err := ch.Start(ctx); err != nil {
		return err
	}
	e.progress("B6 real churn: %s live Running in %d groups; %s cycles, %d per round", count(live), len(groups), count(cycles), batch*len(groups))
	// settle waits until every Deleted record is purged (the retention
	// passed) and every marker expired: the store as it is long after.
	settle := func(done int) (time.Duration, error) {
		t0 := time.Now()
		for {
			kept, purged, err := harness.DeletedKept(lc)
			if err != nil {
				return 0, err
			}
			if kept == 0 && purged == done {
				break
			}
			if time.Since(t0) > 5*time.Minute {
				return 0, fmt.Errorf("%d Deleted records kept, %d purged of %d, 5m after the churn (retention %s)", kept, purged, done, b6ChurnRetention)
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		purgedIn := time.Since(t0)
		return purgedIn, harness.WaitMessages(ctx, cs.JS, messaging.BucketInstances, uint64(live), 5*time.Minute)
	}
	var (
		checks         []b6Checkpoint
		took, purgedIn time.Duration
		maxKept, done  int
		next           = cycles / 4
		start          = time.Now()
	)
	for done < cycles {
		n, err := ch.Round(ctx)
		if err != nil {
			return fmt.Errorf("after %d cycles: %w", done, err)
		}
		done += n
		kept, _, err := harness.DeletedKept(lc)
		if err != nil {
			return err
		}
		maxKept = max(maxKept, kept)
		if done < next && done < cycles {
			continue
		}
		// A checkpoint: the store once the retention and the markers'
		// TTL have passed (not counted in the churn's time).
		took += time.Since(start)
		if purgedIn, err = settle(done); err != nil {
			return err
		}
		st, err := harness.ReadStorage(ctx, cs.JS, cs.World.NATSStoreDir)
		if err != nil {
			return err
		}
		disk, err := harness.DiskBytesOf(cs.World.NATSStoreDir, "KV_"+messaging.BucketInstances)
		if err != nil {
			return err
		}
		checks = append(checks, b6Checkpoint{cycles: done, instBytes: st.InstancesBytes, instMsgs: st.InstancesMsgs, instDisk: disk, deletedKept: kept, purgedIn: purgedIn})
		e.progress("B6 real churn: %s cycles in %s (%d Deleted kept at the end, all purged %s later); instances bucket %d messages, %s, %s on disk",
			count(done), took.Round(time.Second), kept, purgedIn.Round(100*time.Millisecond), st.InstancesMsgs, mib(int(st.InstancesBytes)), mib(int(disk)))
		next += cycles / 4
		start = time.Now()
	}
	created := done + live
	real, err := b6Measure(ctx, cs.JS, cs.World.NATSStoreDir)
	if err != nil {
		return err
	}
	// The synthetic stores, from the same live records and groups.
	ins, err := harness.ReadInstances(ctx, cs.JS)
	if err != nil {
		return err
	}
	grs, err := harness.ReadGroups(ctx, cs.JS)
	if err != nil {
		return err
	}
	cs.Close()
	seed := &harness.Seeded{Groups: grs, Instances: ins}
	synth, err := b6Synthetic(ctx, e, seed, done)
	if err != nil {
		return err
	}
	liveOnly, err := b6Synthetic(ctx, e, seed, 0)
	if err != nil {
		return err
	}

	add(Result{Metric: "cycles through the services", Value: float64(done), Note: fmt.Sprintf("%s, %.0f cycles/s; %d instances created", took.Round(time.Second), float64(done)/took.Seconds(), created)})
	// Lifecycle keeps a Deleted record for the retention, then the purge
	// (every interval, then a batch per pass while a backlog is left)
	// removes it: how many are kept depends on the churn's pace, not on
	// the cycles before.
	add(Result{Metric: "Deleted records kept during the churn (max)", Value: float64(maxKept),
		Note: fmt.Sprintf("retention and purge interval %s, %.0f removals/s", b6ChurnRetention, float64(done)/took.Seconds())})
	// The purge's pace: a batch (100) per dispatcher pass, a pass at
	// least every tick (1 s), once past the retention.
	worst := checks[0]
	var purges string
	for _, c := range checks {
		if c.purgedIn > worst.purgedIn {
			worst = c
		}
		purges += fmt.Sprintf("%d in %s; ", c.deletedKept, c.purgedIn.Round(100*time.Millisecond))
	}
	limit := 2*b6ChurnRetention + time.Duration(worst.deletedKept)*time.Second/b6PurgePerSecond + 5*time.Second
	add(Result{Metric: "last cycle to every Deleted record purged (slowest checkpoint)", Value: sec(worst.purgedIn), Unit: "s",
		Target: fmt.Sprintf("<= retention + interval + %d/s + 5 s (%s)", b6PurgePerSecond, limit.Round(time.Second)), Met: atMost(sec(worst.purgedIn), sec(limit)),
		Note: "Deleted kept at the checkpoint, purged in: " + purges})
	msgs := Result{Metric: "instances bucket messages, real vs synthetic", Value: float64(real.storage.InstancesMsgs),
		Target: "= live, as synthetic", Met: atMost(float64(real.storage.InstancesMsgs), float64(live)),
		Note: fmt.Sprintf("synthetic %d, live only %d; real seq %d..%d; %d records left, %d of them Deleted", synth.storage.InstancesMsgs, liveOnly.storage.InstancesMsgs,
			real.storage.InstancesFirstSeq, real.storage.InstancesLastSeq, real.shape.Records, real.shape.Deleted)}
	*msgs.Met = *msgs.Met && real.shape.Deleted == 0 && real.storage.InstancesMsgs == synth.storage.InstancesMsgs
	add(msgs)
	perLive := func(b uint64) float64 { return float64(b) / float64(live) }
	ratio := perLive(real.storage.InstancesBytes) / perLive(synth.storage.InstancesBytes)
	add(Result{Metric: "instances bucket bytes per live instance, real", Value: perLive(real.storage.InstancesBytes), Unit: "B",
		Target: fmt.Sprintf("within %.0f%% of synthetic", 100*b6ShapeGoal), Met: atMost(math.Abs(ratio-1), b6ShapeGoal),
		Note: fmt.Sprintf("synthetic %.0f B, live only %.0f B (%.2fx); record values %.0f B", perLive(synth.storage.InstancesBytes), perLive(liveOnly.storage.InstancesBytes), ratio, float64(real.shape.ValueBytes)/float64(live))})
	// The store after the retention at each checkpoint: the same bytes
	// per live instance whatever the cycles before.
	perLiveAt := func(c b6Checkpoint) float64 { return perLive(c.instBytes) }
	first, last := checks[0], checks[len(checks)-1]
	var trail string
	for _, c := range checks {
		trail += fmt.Sprintf("%s: %d msgs, %.0f B/live, %s on disk (%d Deleted kept before the retention); ", count(c.cycles), c.instMsgs, perLiveAt(c), mib(int(c.instDisk)), c.deletedKept)
	}
	growth := Result{Metric: "instances bucket bytes per live instance, last vs first checkpoint", Value: perLiveAt(last) / perLiveAt(first), Unit: "x",
		Target: fmt.Sprintf("no growth with cycles (within %.0f%%)", 100*b6ShapeGoal), Note: trail}
	growth.Met = atMost(math.Abs(perLiveAt(last)/perLiveAt(first)-1), b6ShapeGoal)
	add(growth)
	// On disk: JetStream compacts a block once more than half of it is
	// removed (B6's bound: 2x the live records alone), but never the last
	// block, which takes up to b6KVBlock of records written and removed
	// since it was started (lifecycle rewrites a record at each of its ~8
	// transitions: the real churn fills it faster than the synthetic one).
	diskRatio := func(s *b6Store) float64 { return float64(s.instDisk) / float64(liveOnly.instDisk) }
	bound := b6StorageGoal*float64(liveOnly.instDisk) + b6KVBlock
	add(Result{Metric: "instances bucket on disk vs live only", Value: diskRatio(real), Unit: "x",
		Target: fmt.Sprintf("<= %.0fx live only + one %s block (%s)", b6StorageGoal, mib(b6KVBlock), mib(int(bound))),
		Met:    atMost(float64(real.instDisk), bound),
		Note: fmt.Sprintf("real %s, synthetic %s (%.2fx), live only %s; %.1f messages written per instance created (synthetic: 2 per removed)",
			mib(int(real.instDisk)), mib(int(synth.instDisk)), diskRatio(synth), mib(int(liveOnly.instDisk)), float64(real.storage.InstancesLastSeq)/float64(created))})
	add(Result{Metric: "history per live record (mean)", Value: real.shape.HistoryMean, Unit: "transitions",
		Note: fmt.Sprintf("max %d; the synthetic store copies the live records", real.shape.HistoryMax)})
	add(Result{Metric: "stream bytes (all streams), real", Value: float64(real.storage.StreamBytes) / (1 << 20), Unit: "MiB",
		Note: fmt.Sprintf("synthetic %.2f MiB, live only %.2f MiB; real: events %s (%.0f B per instance created, kept %s), commands %s, groups %s, catalog %s",
			float64(synth.storage.StreamBytes)/(1<<20), float64(liveOnly.storage.StreamBytes)/(1<<20),
			mib(int(real.streams[messaging.EventStream])), float64(real.streams[messaging.EventStream])/float64(created), messaging.DefaultOptions().EventRetention,
			mib(int(real.streams[messaging.CommandStream])), mib(int(real.streams["KV_"+messaging.BucketGroups])), mib(int(real.streams["KV_"+messaging.BucketCatalog])))})
	add(Result{Metric: "store on disk, real", Value: float64(real.storage.DiskBytes) / (1 << 20), Unit: "MiB",
		Note: fmt.Sprintf("synthetic %s, live only %s", mib(int(synth.storage.DiskBytes)), mib(int(liveOnly.storage.DiskBytes)))})
	e.progress("B6 real churn: instances bucket %d messages, %.0f B/live (synthetic %d, %.0f B/live), %s on disk (synthetic %s, live only %s)",
		real.storage.InstancesMsgs, perLive(real.storage.InstancesBytes), synth.storage.InstancesMsgs, perLive(synth.storage.InstancesBytes),
		mib(int(real.instDisk)), mib(int(synth.instDisk)), mib(int(liveOnly.instDisk)))
	return nil
}

// b6Synthetic writes seed's groups and live records with history removed
// instances onto a fresh bus, as B6's synthetic store, and measures it.
func b6Synthetic(ctx context.Context, e *env, seed *harness.Seeded, history int) (*b6Store, error) {
	dir, err := e.scratch("b6synth")
	if err != nil {
		return nil, err
	}
	bus, err := harness.StartBusSync(ctx, dir, b6Sync)
	if err != nil {
		return nil, err
	}
	defer bus.Close()
	if _, err := seed.WriteChurn(ctx, bus.JS, history); err != nil {
		return nil, err
	}
	if err := harness.WaitMessages(ctx, bus.JS, messaging.BucketInstances, uint64(len(seed.Instances)), 5*time.Minute); err != nil {
		return nil, err
	}
	return b6Measure(ctx, bus.JS, dir)
}

// b6Measure waits until the store's size on disk settles and reads its
// shape.
func b6Measure(ctx context.Context, js jetstream.JetStream, storeDir string) (*b6Store, error) {
	s := &b6Store{}
	var err error
	if s.storage, err = harness.SettleStorage(ctx, js, storeDir, 2*b6Sync, 2*time.Minute); err != nil {
		return nil, err
	}
	if s.instDisk, err = harness.DiskBytesOf(storeDir, "KV_"+messaging.BucketInstances); err != nil {
		return nil, err
	}
	if s.streams, err = harness.StreamBytes(ctx, js); err != nil {
		return nil, err
	}
	if s.shape, err = harness.ReadRecordShape(ctx, js); err != nil {
		return nil, err
	}
	return s, nil
}
