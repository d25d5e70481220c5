package app

import (
	"context"
	"slices"
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
		in := r.Instance
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
		in := r.Instance
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
