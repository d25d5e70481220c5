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

type inventoryState struct {
	pending map[string]inventoryRequest
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
// than this share of a target's records (and more than a handful) is more
// likely wrong than true, so nothing is closed and an error is logged.
const maxVanishedFraction = 0.5

// RunReconciler asks for the inventory of every account and region in use,
// every ReconcileInterval with jitter, until ctx ends.
func (a *App) RunReconciler(ctx context.Context) error {
	if a.opts.ReconcileInterval <= 0 {
		return nil
	}
	for {
		d := time.Duration(float64(a.opts.ReconcileInterval) * (1 + 0.2*a.jitter()))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d):
		}
		a.RequestInventory(ctx)
	}
}

// RequestInventory publishes one ListInventory per target in use. Each
// reconciler pass is one trace: this span, the cloud adapter's listing
// and HandleInventory's comparison.
func (a *App) RequestInventory(ctx context.Context) {
	ctx, span := a.tracer.Start(ctx, "reconcile: request inventory", ports.SpanOptions{})
	defer span.End(nil)
	a.mu.Lock()
	if !a.loaded {
		a.mu.Unlock()
		return
	}
	if a.inventory == nil {
		a.inventory = &inventoryState{pending: map[string]inventoryRequest{}}
	}
	now := a.clock.Now()
	// Forget requests that were never answered.
	for id, r := range a.inventory.pending {
		if now.Sub(r.sent) > 10*a.opts.ReconcileInterval+time.Hour {
			delete(a.inventory.pending, id)
		}
	}
	targets := map[ports.Target]bool{}
	for _, g := range a.groups {
		targets[targetOf(g.g.Template)] = true
	}
	var reqs []ports.InventoryRequest
	for t := range targets {
		id := "inv-" + a.random(16)
		a.inventory.pending[id] = inventoryRequest{target: t, sent: now}
		reqs = append(reqs, ports.InventoryRequest{RequestID: id, Target: t, ClusterID: a.opts.ClusterID})
	}
	a.mu.Unlock()
	span.SetAttributes(ports.Attribute{Key: "nodesmith.targets", Value: len(reqs)})
	for _, r := range reqs {
		if err := a.cmds.ListInventory(ctx, r); err != nil {
			a.log.Warn("requesting the cloud inventory", "account", r.Target.Account, "region", r.Target.Region, "err", err)
		}
	}
}

// HandleInventory reconciles records with an inventory. Answers to requests
// this leader did not make (another term, another replica) are dropped: the
// reconciler must know when the listing started.
func (a *App) HandleInventory(ctx context.Context, inv Inventory) error {
	ctx, span := a.tracer.Start(ctx, "reconcile: compare inventory", ports.SpanOptions{Attributes: []ports.Attribute{
		{Key: "nodesmith.request_id", Value: inv.RequestID},
		{Key: "nodesmith.cloud_vms", Value: len(inv.Items)},
	}})
	defer span.End(nil)
	a.mu.Lock()
	if !a.loaded || a.inventory == nil {
		a.mu.Unlock()
		return nil
	}
	req, ok := a.inventory.pending[inv.RequestID]
	delete(a.inventory.pending, inv.RequestID)
	if !ok {
		a.mu.Unlock()
		a.log.Debug("inventory of an unknown request dropped", "request", inv.RequestID)
		return nil
	}
	if inv.Err != nil {
		a.mu.Unlock()
		a.log.Warn("cloud inventory failed", "account", req.target.Account, "region", req.target.Region,
			"code", inv.Err.Code, "err", inv.Err.Message)
		return nil
	}
	now := a.clock.Now()
	grace := a.opts.OrphanGrace

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
	for _, r := range a.insts {
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
	var orphans []ports.InstanceRef
	for _, it := range inCloud {
		owned := owners[it.CloudID] ||
			(it.BatchID != "" && waitingBatch[it.BatchID]) ||
			(it.InstanceID != "" && waitingInstance[it.InstanceID])
		if owned || now.Sub(it.CreatedAt) < grace {
			continue
		}
		orphans = append(orphans, ports.InstanceRef{InstanceID: it.InstanceID, Group: it.Group, CloudID: it.CloudID})
	}
	// Vanished: records whose VM is not listed, known since before the
	// listing started (with grace for the cloud's eventual consistency).
	var vanished []string
	considered := 0
	for id, r := range a.insts {
		in := r.inst
		g, ok := a.groups[in.Group]
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
	a.mu.Unlock()

	if len(vanished) > 3 && float64(len(vanished)) > maxVanishedFraction*float64(considered) {
		a.log.Error("inventory misses most VMs of the records; not trusting it", "account", req.target.Account,
			"region", req.target.Region, "missing", len(vanished), "records", considered)
		vanished = nil
	}
	a.obs.OrphansFound(len(orphans))
	span.SetAttributes(ports.Attribute{Key: "nodesmith.orphans_found", Value: len(orphans)},
		ports.Attribute{Key: "nodesmith.vanished", Value: len(vanished)})
	closed := 0
	for _, id := range vanished {
		res, _, err := a.Apply(ctx, id, domain.VMGone{Reason: "not in the cloud inventory"})
		if err != nil {
			a.log.Warn("closing a record whose VM vanished", "instance", id, "err", err)
			continue
		}
		if res.Changed {
			closed++
		}
	}
	terminated := 0
	for chunk := range slices.Chunk(orphans, maxRefsPerCommand) {
		if err := a.cmds.Terminate(ctx, ports.TerminateCommand{Target: req.target, ClusterID: a.opts.ClusterID, Instances: chunk}); err != nil {
			a.log.Warn("terminating orphan VMs", "count", len(chunk), "err", err)
			continue
		}
		terminated += len(chunk)
		for _, o := range chunk {
			a.log.Warn("terminating an orphan VM", "cloud_id", o.CloudID, "instance", o.InstanceID, "group", o.Group)
		}
	}
	if closed > 0 || terminated > 0 {
		a.log.Info("reconciled with the cloud inventory", "orphans_terminated", terminated, "vanished_closed", closed)
	}
	a.obs.Reconciled(terminated, closed)
	span.SetAttributes(ports.Attribute{Key: "nodesmith.orphans_terminated", Value: terminated},
		ports.Attribute{Key: "nodesmith.vanished_closed", Value: closed})
	return nil
}
