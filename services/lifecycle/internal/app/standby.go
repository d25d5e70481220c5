package app

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// A replica that is not leading keeps the instance records loaded (warm
// standby): RunStandby lists them once, then reads what changed every
// StandbyInterval, so a promotion (load) reads only the changes since the
// last look instead of every record. Nothing else is kept: groups, the
// catalog and the hold are few and re-read at every load.
//
// Correctness rests on the store, as for the leader: the copy is keyed by
// revision (a change applies only over an older one), the load's final
// catch-up runs after leadership is won, so it reads every write the last
// leader made (a write is in the store once acknowledged), and every write
// of the new leader is a compare-and-set on the revision it read. A copy
// that may have missed removals (older than the store keeps them) or a
// recreated store means a full load.

// RunStandby keeps the instance records current while this replica is not
// leading, until ctx ends. It does nothing if the store has no change feed.
func (a *App) RunStandby(ctx context.Context) error {
	if a.feed == nil || a.opts.StandbyInterval <= 0 {
		return nil
	}
	t := time.NewTicker(a.opts.StandbyInterval)
	defer t.Stop()
	for {
		if err := a.follow(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("standby: reading instance records failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// follow brings the standby copy up to date: a full list when there is
// none, else the changes since. It does nothing while leading.
func (a *App) follow(ctx context.Context) error {
	a.loadMu.Lock()
	defer a.loadMu.Unlock()
	a.mu.Lock()
	leading := a.loaded
	a.mu.Unlock()
	if leading {
		return nil
	}
	if a.catchUp(ctx) {
		return nil
	}
	// Only load, under the same loadMu, makes this replica lead.
	n, err := a.loadAll(ctx)
	if err != nil {
		return err
	}
	a.log.Info("standby: instance records loaded", "instances", n)
	return nil
}

// feedPos returns the feed's position before a full list (zero without a
// feed).
func (a *App) feedPos(ctx context.Context) (ports.FeedPos, error) {
	if a.feed == nil {
		return ports.FeedPos{}, nil
	}
	pos, err := a.feed.InstancesPos(ctx)
	if err != nil {
		return ports.FeedPos{}, fmt.Errorf("reading the instances' position: %w", err)
	}
	return pos, nil
}

// loadReleaseMin is the smallest full load after which releaseLoadGarbage
// collects: below it the garbage is small and the pause not worth it.
const loadReleaseMin = 10_000

// releaseLoadGarbage collects and returns the freed memory to the OS
// right after a full load of n instance records (issue 20). The load's
// transients (KV messages, decoded protobuf, the listing's maps and
// keys) are garbage once the records are cached, but the collector set
// its next goal from the heap while they were live, and the pages they
// took stay resident until it gets there: at 100,000 records RSS sat at
// 2.2-2.6x the live heap. One collection (~0.1 s there, while nothing is
// served yet) sets the goal from the records alone.
func releaseLoadGarbage(n int) {
	if n >= loadReleaseMin {
		debug.FreeOSMemory()
	}
}

// setInstancesLocked replaces the cached instances by is, read after pos.
// The cache keeps the records of is (the store's to give).
func (a *App) setInstancesLocked(is []*ports.VersionedInstance, pos ports.FeedPos) {
	a.insts = make(map[string]*instRec, len(is))
	a.byProvider = make(map[string]string, len(is))
	a.idx = newInstIndex()
	for _, v := range is {
		a.putInstLocked(v)
	}
	a.warm = a.feed != nil
	a.warmPos, a.warmAt = pos, a.clock.Now()
}

// catchUp applies the changes since the standby copy's position and
// reports whether the copy is now current; false (no copy, too old, the
// store recreated, or an error) asks for a full list. loadMu is held.
func (a *App) catchUp(ctx context.Context) bool {
	a.mu.Lock()
	warm, pos, at := a.warm && !a.loaded, a.warmPos, a.warmAt
	a.mu.Unlock()
	if !warm || a.feed == nil {
		return false
	}
	// A removal is known for RemovalsKept: half of it leaves a margin
	// for clocks and slow reads.
	if kept := a.feed.RemovalsKept(); kept > 0 && a.clock.Now().Sub(at) > kept/2 {
		a.log.Info("standby copy too old to catch up: reading every instance record", "age", a.clock.Now().Sub(at))
		return false
	}
	now := a.clock.Now()
	ch, err := a.feed.InstancesSince(ctx, pos)
	if err != nil {
		a.log.Info("standby copy cannot catch up: reading every instance record", "err", err)
		a.mu.Lock()
		a.warm = false
		a.mu.Unlock()
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.loaded || !a.warm || a.warmPos != pos {
		return false
	}
	for _, v := range ch.Changed {
		if r, ok := a.insts[v.Instance.ID]; ok && r.Revision >= v.Revision {
			continue
		}
		if rev, ok := ch.Removed[v.Instance.ID]; ok && rev > v.Revision {
			continue
		}
		a.setInstLocked(v.Instance, v.Revision)
	}
	for id, rev := range ch.Removed {
		if r, ok := a.insts[id]; ok && r.Revision < rev {
			a.dropInstLocked(id)
		}
	}
	a.warmPos, a.warmAt = ch.Pos, now
	return true
}
