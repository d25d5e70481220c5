package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// The orphan hold: the start-up hold, the operator's release and their
// stored record (see reconcile.go for the safeguards they are part of).

// storedHold is the stored hold a load read (found: there was one) and
// the identity of the instances bucket the load read the records from.
type storedHold struct {
	hold   ports.OrphanHold
	rev    uint64
	found  bool
	bucket string
}

// loadHold reads the stored hold, for load (nothing without a HoldStore).
func (rc *reconciler) loadHold(ctx context.Context) (storedHold, error) {
	if rc.holds == nil {
		return storedHold{}, nil
	}
	var st storedHold
	h, rev, err := rc.holds.GetOrphanHold(ctx)
	switch {
	case err == nil:
		st = storedHold{hold: h, rev: rev, found: true}
	case !errors.Is(err, ports.ErrNotFound):
		return storedHold{}, fmt.Errorf("reading the orphan hold: %w", err)
	}
	if st.bucket, err = rc.holds.InstancesBucketID(ctx); err != nil {
		return storedHold{}, fmt.Errorf("identifying the instances bucket: %w", err)
	}
	return st, nil
}

// resumeHoldLocked takes over the stored hold and release at a load, and
// starts a new hold when the records are a new state: no instance record
// and no stored hold (a fresh install, or lost state with the hold lost
// too), an instances bucket other than the one the stored hold knows
// (deleted and recreated, or restored: the state was lost), or no record
// left although the stored hold saw records (emptied key by key). A new state
// also forgets the release of the old one: the VMs that had records when
// it was given look like orphans created before it once those records
// are lost. A restart, or a new leader, on the same state resumes what
// is stored: a hold goes on, a release stays given.
func (rc *reconciler) resumeHoldLocked(ctx context.Context, st storedHold, empty bool) error {
	now := rc.clock.Now()
	if rc.holds == nil {
		if empty {
			rc.beginStartupHoldLocked(now)
		}
		return nil
	}
	rc.holdRev, rc.holdSaved = st.rev, st.hold
	rc.holdBucket, rc.holdHadRecords = st.hold.InstancesBucket, st.hold.HadRecords
	rc.hold = startupHold{since: st.hold.Since, until: st.hold.Until}
	rc.releasedAt = st.hold.ReleasedAt
	rc.setReleasedLocked(st.hold.Released)
	newState := (!st.found && empty) ||
		(st.found && st.hold.InstancesBucket != st.bucket) ||
		(st.found && empty && st.hold.HadRecords)
	if !newState {
		if since, active := rc.startupHoldLocked(now); active {
			rc.log.Warn("resuming the stored start-up hold: tagged VMs without a record created before it are held back, not terminated, "+
				"until an operator releases them or the hold ends", "hold_since", since, "hold_until", rc.hold.until,
				"release", releaseCall)
		}
		if !st.found || (!empty && !rc.holdHadRecords) {
			// Remember which bucket the records are in and that there are
			// records, so that losing them is noticed.
			rc.holdBucket, rc.holdHadRecords = st.bucket, !empty
			if err := rc.saveHoldLocked(ctx); err != nil {
				return fmt.Errorf("storing the orphan hold: %w", err)
			}
		}
		return nil
	}
	if st.found {
		rc.log.Error("the instance records are not those the stored orphan hold knew (another instances bucket, or none left of "+
			"those it saw): the state was lost (or restored); the earlier release no longer applies",
			"stored_bucket", st.hold.InstancesBucket, "bucket", st.bucket, "records_empty", empty, "had_records", st.hold.HadRecords)
	}
	rc.hold, rc.releasedAt = startupHold{}, time.Time{}
	rc.setReleasedLocked(nil)
	rc.holdBucket, rc.holdHadRecords = st.bucket, !empty
	rc.beginStartupHoldLocked(now)
	if rc.inventory != nil {
		rc.inventory.held = map[ports.Target]heldOrphans{}
	}
	if err := rc.saveHoldLocked(ctx); err != nil {
		return fmt.Errorf("storing the orphan hold: %w", err)
	}
	return nil
}

// releaseCall is the admin call that releases held orphans.
const releaseCall = "POST /api/v1/reconciler/release-orphans"

// holdRecordLocked is the record of the hold as it stands.
func (rc *reconciler) holdRecordLocked() ports.OrphanHold {
	s := rc.heldOrphansLocked()
	return ports.OrphanHold{
		Since: s.HoldSince, Until: s.HoldUntil, InstancesBucket: rc.holdBucket, HadRecords: rc.holdHadRecords, ReleasedAt: rc.releasedAt,
		Released: rc.releasedIDs, Held: s.Held, Waiting: s.Waiting,
	}
}

// saveHoldLocked writes the hold record with compare-and-set. On a
// conflict (another leader overlapping) it learns the stored revision and
// returns the conflict, for the caller to retry.
func (rc *reconciler) saveHoldLocked(ctx context.Context) error {
	if rc.holds == nil {
		return nil
	}
	rec := rc.holdRecordLocked()
	rec.UpdatedAt = rc.clock.Now()
	rev, err := rc.holds.PutOrphanHold(ctx, rec, rc.holdRev)
	if err != nil {
		if errors.Is(err, ports.ErrConflict) {
			switch _, r, gerr := rc.holds.GetOrphanHold(ctx); {
			case gerr == nil:
				rc.holdRev = r
			case errors.Is(gerr, ports.ErrNotFound):
				rc.holdRev = 0
			}
		}
		return err
	}
	rc.holdRev, rc.holdSaved = rev, rec
	return nil
}

// persistHoldLocked stores the hold record when it changed (what is held,
// the hold ending); failures are logged and retried at the next pass.
func (rc *reconciler) persistHoldLocked(ctx context.Context) {
	if rc.holds == nil {
		return
	}
	rc.holdHadRecords = rc.holdHadRecords || len(rc.insts) > 0
	rec, saved := rc.holdRecordLocked(), rc.holdSaved
	saved.UpdatedAt = time.Time{}
	if holdEqual(rec, saved) {
		return
	}
	for range 2 {
		err := rc.saveHoldLocked(ctx)
		if err == nil {
			return
		}
		if !errors.Is(err, ports.ErrConflict) {
			rc.log.Warn("storing the orphan hold", "err", err)
			return
		}
	}
}

func holdEqual(x, y ports.OrphanHold) bool {
	return x.Since.Equal(y.Since) && x.Until.Equal(y.Until) && x.InstancesBucket == y.InstancesBucket && x.HadRecords == y.HadRecords &&
		x.ReleasedAt.Equal(y.ReleasedAt) && slices.Equal(x.Released, y.Released) && maps.Equal(x.Held, y.Held) &&
		slices.Equal(x.Waiting, y.Waiting)
}

// beginStartupHoldLocked starts the start-up hold at a load that found no
// instance record (a hold already running keeps its start).
func (rc *reconciler) beginStartupHoldLocked(now time.Time) {
	if rc.opts.EmptyStartOrphanHold <= 0 {
		return
	}
	if _, active := rc.startupHoldLocked(now); active {
		return
	}
	rc.hold = startupHold{since: now, until: now.Add(rc.opts.EmptyStartOrphanHold)}
	rc.log.Warn("started with no instance records: tagged VMs without a record created before now are held back, "+
		"not terminated, until an operator releases them or the hold ends",
		"hold_until", rc.hold.until, "release", releaseCall)
}

// startupHoldLocked returns the start of the start-up hold while it is
// active, ending it once its quiet period has passed.
func (rc *reconciler) startupHoldLocked(now time.Time) (time.Time, bool) {
	if rc.hold.since.IsZero() {
		return time.Time{}, false
	}
	if !now.Before(rc.hold.until) {
		rc.log.Warn("the start-up hold of orphan VMs ended: its quiet period passed; the reconciler's other safeguards still apply",
			"hold_since", rc.hold.since, "hold_until", rc.hold.until)
		rc.hold = startupHold{}
		return time.Time{}, false
	}
	return rc.hold.since, true
}

// holdOrphansLocked applies the safeguards (see the top of this file) to
// the orphans of one comparison of target, where listed tagged VMs were
// listed. It returns the orphans to terminate, oldest first, and how many
// were held back, and records and reports what it held.
func (rc *reconciler) holdOrphansLocked(t ports.Target, orphans []InventoryItem, listed int, now time.Time) ([]InventoryItem, int) {
	oldestFirst := func(x, y InventoryItem) int {
		if c := x.CreatedAt.Compare(y.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(x.CloudID, y.CloudID)
	}
	slices.SortFunc(orphans, oldestFirst)
	h := heldOrphans{byReason: map[string]int{}}
	holdSince, holding := rc.startupHoldLocked(now)
	var out []InventoryItem
	var unconfirmed []InventoryItem
	for _, o := range orphans {
		switch {
		case rc.released[o.CloudID]:
			out = append(out, o)
		case holding && o.CreatedAt.Before(holdSince):
			h.byReason[HeldEmptyStart]++
			h.waiting = append(h.waiting, o.CloudID)
		default:
			unconfirmed = append(unconfirmed, o)
		}
	}
	if len(unconfirmed) > implausibleMin && float64(len(unconfirmed)) > maxOrphanFraction*float64(listed) {
		h.byReason[HeldImplausible] = len(unconfirmed)
		for _, o := range unconfirmed {
			h.waiting = append(h.waiting, o.CloudID)
		}
		unconfirmed = nil
	}
	out = append(out, unconfirmed...)
	slices.SortFunc(out, oldestFirst)
	if limit := max(rc.opts.MaxOrphanTerminations, 0); len(out) > limit {
		h.byReason[HeldCap] = len(out) - limit
		out = out[:limit]
	}
	inv := rc.inventoryLocked()
	prev := inv.held[t]
	inv.held[t] = h
	if !maps.Equal(prev.byReason, h.byReason) || !slices.Equal(prev.waiting, h.waiting) {
		rc.reportHeldLocked(t, h, listed, holdSince)
	}
	held := 0
	for _, n := range h.byReason {
		held += n
	}
	return out, held
}

// reportHeldLocked logs what one comparison held back, when it changed.
func (rc *reconciler) reportHeldLocked(t ports.Target, h heldOrphans, listed int, holdSince time.Time) {
	log := rc.log.With("account", t.Account, "region", t.Region, "cluster", rc.opts.ClusterID)
	var startup, implausible []string
	if n := h.byReason[HeldEmptyStart]; n > 0 {
		startup = h.waiting[:n]
	}
	if n := h.byReason[HeldImplausible]; n > 0 {
		implausible = h.waiting[len(h.waiting)-n:]
	}
	if len(startup) > 0 {
		log.Warn("holding back orphan VMs created before lifecycle started with no instance records: not terminated until an operator "+
			"releases them (POST /api/v1/reconciler/release-orphans) or the hold ends; if the state was lost, they may be this cluster's nodes",
			"count", len(startup), "cloud_ids", listIDs(startup), "hold_since", holdSince, "hold_until", rc.hold.until)
	}
	if len(implausible) > 0 {
		log.Error("most tagged VMs have no record: the state was lost or another cluster uses this cluster id; terminating none of them "+
			"(give each cluster its own --cluster-id; release them through POST /api/v1/reconciler/release-orphans only if they are orphans)",
			"count", len(implausible), "listed", listed, "cloud_ids", listIDs(implausible))
	}
	if n := h.byReason[HeldCap]; n > 0 {
		log.Warn("more orphan VMs than one pass may terminate: the rest wait for the next passes",
			"held", n, "max_per_pass", rc.opts.MaxOrphanTerminations)
	}
}

// listIDs joins at most maxListedIDs ids for a log line.
func listIDs(ids []string) string {
	if len(ids) <= maxListedIDs {
		return strings.Join(ids, ",")
	}
	return strings.Join(ids[:maxListedIDs], ",") + fmt.Sprintf(",... (%d more)", len(ids)-maxListedIDs)
}

// ReleaseOrphans is an operator's confirmation that the orphan VMs the
// reconciler holds back are orphans: it ends the start-up hold, and the VMs
// held back now (by the start-up hold or the plausibility valve: those the
// latest comparisons listed as waiting, and the stored list) are no longer
// held by the valve either. Only they: VMs that lose their record later meet
// the valve like any other. The cap still applies: they are terminated from
// the next pass on, at most MaxOrphanTerminations per comparison. The
// release is stored with the hold: it outlives a restart and a change of
// leader, up to the next loss of the state (resumeHoldLocked).
func (rc *reconciler) ReleaseOrphans(ctx context.Context) (Revisions, error) {
	return rc.req.op(ctx, "ReleaseOrphans", func() (Revisions, error) {
		now := rc.clock.Now()
		inv := rc.inventoryLocked()
		targets := slices.SortedFunc(maps.Keys(inv.held), func(x, y ports.Target) int {
			return strings.Compare(x.Provider+"/"+x.Account+"/"+x.Region, y.Provider+"/"+y.Account+"/"+y.Region)
		})
		var waiting []string
		for _, t := range targets {
			waiting = append(waiting, inv.held[t].waiting...)
		}
		// What another term held (stored) and earlier releases not yet
		// terminated (the cap) stay released.
		ids := slices.Concat(waiting, rc.holdSaved.Waiting, rc.releasedIDs)
		hold, at, released := rc.hold, rc.releasedAt, rc.releasedIDs
		rc.hold = startupHold{}
		rc.releasedAt = now
		rc.setReleasedLocked(ids)
		if err := rc.saveHoldLocked(ctx); err != nil {
			rc.hold, rc.releasedAt = hold, at
			rc.setReleasedLocked(released)
			return Revisions{}, err
		}
		rc.log.Warn("orphan VMs released by an operator: those held back now are terminated from the next reconciler pass on",
			"held", len(waiting), "released", len(rc.releasedIDs), "max_per_pass", rc.opts.MaxOrphanTerminations)
		return Revisions{}, nil
	})
}

// setReleasedLocked sets the cloud ids a release confirmed: ids without
// duplicates, the first maxReleasedIDs.
func (rc *reconciler) setReleasedLocked(ids []string) {
	rc.released, rc.releasedIDs = map[string]bool{}, nil
	for _, id := range ids {
		if len(rc.releasedIDs) == maxReleasedIDs {
			break
		}
		if id != "" && !rc.released[id] {
			rc.released[id] = true
			rc.releasedIDs = append(rc.releasedIDs, id)
		}
	}
}

// noteInstanceRecordLocked stores, once, that instance records exist
// (hadRecords) when one is created: a loss of them before the next
// reconciler pass must still be noticed at the next load.
func (rc *reconciler) noteInstanceRecordLocked(ctx context.Context) {
	if rc.holds == nil || rc.holdSaved.HadRecords {
		return
	}
	rc.persistHoldLocked(ctx)
}

// OrphanStatus is what the reconciler holds back (see the top of this
// file), for metrics and the status summary.
type OrphanStatus = ports.OrphanStatus

// HeldOrphans returns what the latest comparisons held back; ok is false
// while not leading.
func (rc *reconciler) HeldOrphans() (OrphanStatus, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if !rc.loaded {
		return OrphanStatus{}, false
	}
	return rc.heldOrphansLocked(), true
}

func (rc *reconciler) heldOrphansLocked() OrphanStatus {
	var s OrphanStatus
	if since, ok := rc.startupHoldLocked(rc.clock.Now()); ok {
		s.HoldSince, s.HoldUntil = since, rc.hold.until
	}
	if rc.inventory == nil {
		return s
	}
	targets := slices.SortedFunc(maps.Keys(rc.inventory.held), func(x, y ports.Target) int {
		return strings.Compare(x.Provider+"/"+x.Account+"/"+x.Region, y.Provider+"/"+y.Account+"/"+y.Region)
	})
	for _, t := range targets {
		h := rc.inventory.held[t]
		for r, n := range h.byReason {
			if n == 0 {
				continue
			}
			if s.Held == nil {
				s.Held = map[string]int{}
			}
			s.Held[r] += n
		}
		s.Waiting = append(s.Waiting, h.waiting...)
	}
	s.Waiting = s.Waiting[:min(len(s.Waiting), maxListedIDs)]
	return s
}
