package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// The reconciler compares the cloud's inventory of VMs tagged with our
// cluster id with the records. It is the safety net behind everything else:
//   - a tagged VM that no live record owns (its record is gone, Deleted, or
//     names another VM) and that is older than the grace period is an
//     orphan (a crash between a create and its record update, a create
//     result that arrived after the record was closed): it is terminated;
//   - a live record whose VM is not in the inventory vanished (deleted
//     outside nodesmith): it is closed (Deleted, Node removed) and, being
//     still counted in the target, replaced by the dispatcher.
//
// Destruction must not run away when the records are wrong rather than the
// cloud: a lost instances bucket, or another cluster tagging its VMs with
// the same cluster id, makes every VM look like an orphan. So orphans are
// terminated under three safeguards, in this order:
//   - the start-up hold: a term that starts with no instance record at all
//     holds back (reports, never terminates) the orphans created before it
//     started, until an operator releases them (ReleaseOrphans) or
//     Options.EmptyStartOrphanHold passes. Orphans created later follow the
//     normal rules;
//   - the plausibility valve: orphans that are more than maxOrphanFraction
//     of the tagged VMs listed (and more than implausibleMin) are held back
//     all together, with an error: that is state loss or a shared cluster
//     id, not crashes;
//   - the cap: at most Options.MaxOrphanTerminations per comparison (one
//     account and region per pass), the oldest first; the rest wait for the
//     next passes.
// An operator's release also confirms the orphans held back when it is
// given (their cloud ids, stored), which the valve then no longer holds back
// (the cap still applies); other VMs, created before the release or not, still
// meet the valve, so a later partial loss of the records is held. The hold and
// the release are stored (ports.HoldStore, beside the groups) and resumed at
// every load, so that a change of leader or a restart keeps holding and a
// release outlives a restart; a load from another instances bucket than the
// stored hold's is a new state loss (resumeHoldLocked).

// reconciler compares the cloud's inventory with the records, terminates
// orphans and keeps the orphan hold (hold.go).
type reconciler struct {
	*cache
	req       *requests
	inventory *inventoryState
	// hold is the start-up hold of orphan VMs, releasedAt the time of an
	// operator's release and released the cloud ids it confirmed. They are
	// stored (holds, at holdRev, taken on the instances bucket holdBucket)
	// and loaded with every term; saved is the record last written.
	hold           startupHold
	releasedAt     time.Time
	released       map[string]bool
	releasedIDs    []string
	holds          ports.HoldStore
	holdRev        uint64
	holdBucket     string
	holdHadRecords bool
	holdSaved      ports.OrphanHold
}

func newReconciler(c *cache, r *requests, holds ports.HoldStore) *reconciler {
	return &reconciler{cache: c, req: r, holds: holds}
}

type inventoryState struct {
	pending map[string]inventoryRequest
	// held is what the latest comparison of each target held back (a
	// change is logged, not every pass).
	held map[ports.Target]heldOrphans
}

// Why the reconciler holds an orphan back (the label values of the held
// orphans metric).
const (
	HeldEmptyStart  = "empty_start"
	HeldImplausible = "implausible"
	HeldCap         = "cap"
)

// HeldReasons lists the reasons, for metrics.
var HeldReasons = []string{HeldEmptyStart, HeldImplausible, HeldCap}

// heldOrphans is what one comparison held back.
type heldOrphans struct {
	byReason map[string]int
	// waiting are the cloud ids held for an operator (start-up hold and
	// valve), oldest first.
	waiting []string
}

// startupHold is the start-up hold (see above); zero when none is active.
type startupHold struct {
	since, until time.Time
}

type inventoryRequest struct {
	target ports.Target
	sent   time.Time
}

// Inventory is the cloud's answer to a ListInventory request.
type Inventory struct {
	RequestID string
	Target    ports.Target
	Items     []InventoryItem
	// Err is set when listing failed; nothing is concluded then.
	Err *domain.CloudError
}

// InventoryItem is one tagged VM.
type InventoryItem struct {
	CloudID string
	// InstanceID is empty for VMs of multi-instance batches, which carry
	// only their batch id.
	InstanceID string
	BatchID    string
	Group      string
	State      domain.CloudState
	CreatedAt  time.Time
}

// maxVanishedFraction is a safety valve: an inventory that would close more
// than this share of a target's records (and more than implausibleMin) is
// more likely wrong than true, so nothing is closed and an error is logged.
const maxVanishedFraction = 0.5

// maxOrphanFraction is the same valve for orphans: more orphans than this
// share of the tagged VMs listed (and more than implausibleMin) means the
// records are wrong (state loss) or another cluster shares our cluster id,
// so none is terminated and an error is logged.
const maxOrphanFraction = 0.5

// implausibleMin is the handful of records or VMs the valves always let
// through: in a small fleet one crash can orphan half of it.
const implausibleMin = 3

// maxListedIDs bounds the cloud ids a log line or the status lists.
const maxListedIDs = 50

// maxReleasedIDs bounds the cloud ids a release confirms (stored in the
// hold record): VMs beyond it meet the valve again and wait for another
// release.
const maxReleasedIDs = 10000

// RunReconciler asks for the inventory of every account and region in use,
// every ReconcileInterval with jitter, until ctx ends.
func (rc *reconciler) RunReconciler(ctx context.Context) error {
	if rc.opts.ReconcileInterval <= 0 {
		return nil
	}
	for {
		d := time.Duration(float64(rc.opts.ReconcileInterval) * (1 + 0.2*rc.jitter()))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d):
		}
		rc.RequestInventory(ctx)
	}
}

// RequestInventory publishes one ListInventory per target in use. Each
// reconciler pass is one trace: this span, the cloud adapter's listing
// and HandleInventory's comparison.
func (rc *reconciler) RequestInventory(ctx context.Context) {
	ctx, span := rc.tracer.Start(ctx, "reconcile: request inventory", ports.SpanOptions{})
	defer span.End(nil)
	rc.mu.Lock()
	if !rc.loaded {
		rc.mu.Unlock()
		return
	}
	rc.inventoryLocked()
	now := rc.clock.Now()
	// Forget requests that were never answered.
	for id, r := range rc.inventory.pending {
		if now.Sub(r.sent) > 10*rc.opts.ReconcileInterval+time.Hour {
			delete(rc.inventory.pending, id)
		}
	}
	targets := map[ports.Target]bool{}
	for _, g := range rc.groups {
		targets[targetOf(g.g.Template)] = true
	}
	// What a target no group uses any more held back is no longer held.
	for t := range rc.inventory.held {
		if !targets[t] {
			delete(rc.inventory.held, t)
		}
	}
	var reqs []ports.InventoryRequest
	for t := range targets {
		id := "inv-" + rc.random(16)
		rc.inventory.pending[id] = inventoryRequest{target: t, sent: now}
		reqs = append(reqs, ports.InventoryRequest{RequestID: id, Target: t, ClusterID: rc.opts.ClusterID})
	}
	rc.mu.Unlock()
	span.SetAttributes(ports.Attribute{Key: "nodesmith.targets", Value: len(reqs)})
	for _, r := range reqs {
		if err := rc.cmds.ListInventory(ctx, r); err != nil {
			rc.log.Warn("requesting the cloud inventory", "account", r.Target.Account, "region", r.Target.Region, "err", err)
		}
	}
}

// HandleInventory reconciles records with an inventory. Answers to requests
// this leader did not make (another term, another replica) are dropped: the
// reconciler must know when the listing started.
func (rc *reconciler) HandleInventory(ctx context.Context, inv Inventory) error {
	ctx, span := rc.tracer.Start(ctx, "reconcile: compare inventory", ports.SpanOptions{Attributes: []ports.Attribute{
		{Key: "nodesmith.request_id", Value: inv.RequestID},
		{Key: "nodesmith.cloud_vms", Value: len(inv.Items)},
	}})
	defer span.End(nil)
	rc.mu.Lock()
	if !rc.loaded || rc.inventory == nil {
		rc.mu.Unlock()
		return nil
	}
	req, ok := rc.inventory.pending[inv.RequestID]
	delete(rc.inventory.pending, inv.RequestID)
	if !ok {
		rc.mu.Unlock()
		rc.log.Debug("inventory of an unknown request dropped", "request", inv.RequestID)
		return nil
	}
	if inv.Err != nil {
		rc.mu.Unlock()
		rc.log.Warn("cloud inventory failed", "account", req.target.Account, "region", req.target.Region,
			"code", inv.Err.Code, "err", inv.Err.Message)
		return nil
	}
	now := rc.clock.Now()
	grace := rc.opts.OrphanGrace

	inCloud := map[string]InventoryItem{}
	for _, it := range inv.Items {
		if it.State != domain.CloudTerminating && it.State != domain.CloudNotFound {
			inCloud[it.CloudID] = it
		}
	}
	// Orphans: VMs no record owns. A VM is owned by the record that holds
	// its cloud id, or, while a create result is outstanding, by the records
	// of its batch (the cloud adapter tags multi-instance batches with the
	// batch id only).
	owners := map[string]bool{}
	waitingBatch := map[string]bool{}
	waitingInstance := map[string]bool{}
	for _, r := range rc.insts {
		in := r.inst
		if in.State == domain.StateDeleted {
			continue
		}
		if in.CloudID != "" {
			owners[in.CloudID] = true
		} else if in.BatchID != "" {
			waitingBatch[in.BatchID] = true
			waitingInstance[in.ID] = true
		}
	}
	var orphans []InventoryItem
	for _, it := range inCloud {
		owned := owners[it.CloudID] ||
			(it.BatchID != "" && waitingBatch[it.BatchID]) ||
			(it.InstanceID != "" && waitingInstance[it.InstanceID])
		if owned || now.Sub(it.CreatedAt) < grace {
			continue
		}
		orphans = append(orphans, it)
	}
	found := len(orphans)
	orphans, held := rc.holdOrphansLocked(req.target, orphans, len(inCloud), now)
	rc.persistHoldLocked(ctx)
	// Vanished: records whose VM is not listed, known since before the
	// listing started (with grace for the cloud's eventual consistency).
	var vanished []string
	considered := 0
	for id, r := range rc.insts {
		in := r.inst
		g, ok := rc.groups[in.Group]
		if !ok || targetOf(g.g.Template) != req.target || in.CloudID == "" || in.Adopted {
			// An adopted VM lacks our cluster tag: the inventory cannot
			// list it, so its absence there means nothing.
			continue
		}
		switch in.State {
		case domain.StateCreated, domain.StateJoined, domain.StateRunning, domain.StatePendingDeletion:
		default:
			continue
		}
		considered++
		if _, listed := inCloud[in.CloudID]; !listed && req.sent.Sub(in.StateSince) > grace {
			vanished = append(vanished, id)
		}
	}
	rc.mu.Unlock()

	if len(vanished) > implausibleMin && float64(len(vanished)) > maxVanishedFraction*float64(considered) {
		rc.log.Error("inventory misses most VMs of the records; not trusting it", "account", req.target.Account,
			"region", req.target.Region, "missing", len(vanished), "records", considered)
		vanished = nil
	}
	rc.obs.OrphansFound(found)
	span.SetAttributes(ports.Attribute{Key: "nodesmith.orphans_found", Value: found},
		ports.Attribute{Key: "nodesmith.orphans_held", Value: held},
		ports.Attribute{Key: "nodesmith.vanished", Value: len(vanished)})
	closed := 0
	for _, id := range vanished {
		res, _, err := rc.Apply(ctx, id, domain.VMGone{Reason: "not in the cloud inventory"})
		if err != nil {
			rc.log.Warn("closing a record whose VM vanished", "instance", id, "err", err)
			continue
		}
		if res.Changed {
			closed++
		}
	}
	refs := make([]ports.InstanceRef, len(orphans))
	for i, o := range orphans {
		refs[i] = ports.InstanceRef{InstanceID: o.InstanceID, Group: o.Group, CloudID: o.CloudID}
	}
	terminated := 0
	for chunk := range slices.Chunk(refs, maxRefsPerCommand) {
		if err := rc.cmds.Terminate(ctx, ports.TerminateCommand{Target: req.target, ClusterID: rc.opts.ClusterID, Instances: chunk}); err != nil {
			rc.log.Warn("terminating orphan VMs", "count", len(chunk), "err", err)
			continue
		}
		terminated += len(chunk)
		for _, o := range chunk {
			rc.log.Warn("terminating an orphan VM", "cloud_id", o.CloudID, "instance", o.InstanceID, "group", o.Group,
				"account", req.target.Account, "region", req.target.Region)
		}
	}
	if closed > 0 || terminated > 0 {
		rc.log.Info("reconciled with the cloud inventory", "orphans_terminated", terminated, "vanished_closed", closed)
	}
	rc.obs.Reconciled(terminated, closed)
	span.SetAttributes(ports.Attribute{Key: "nodesmith.orphans_terminated", Value: terminated},
		ports.Attribute{Key: "nodesmith.vanished_closed", Value: closed})
	return nil
}

// inventoryLocked returns the reconciler's state, made on first use.
func (rc *reconciler) inventoryLocked() *inventoryState {
	if rc.inventory == nil {
		rc.inventory = &inventoryState{pending: map[string]inventoryRequest{}, held: map[ports.Target]heldOrphans{}}
	}
	return rc.inventory
}

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
