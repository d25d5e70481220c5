package app

import (
	"context"
	"sort"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// RunDispatcher drives every instance towards its next step until ctx
// ends. It is level-triggered: each pass looks at every record that can
// have work (the index of instances not at rest, kept on every change), so
// a missed wake-up only delays work until the next tick.
func (a *App) RunDispatcher(ctx context.Context) error {
	t := time.NewTicker(a.opts.TickInterval)
	defer t.Stop()
	for {
		a.Pass(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-a.wake:
		case <-t.C:
		}
	}
}

// Pass runs one dispatcher pass: keep group sizes, fire deadlines and
// retries, promote Ready nodes, start creations and deletions within
// parallelism, publish outstanding commands and purge old records.
func (a *App) Pass(ctx context.Context) {
	a.mu.Lock()
	if !a.loaded {
		a.mu.Unlock()
		return
	}
	now := a.clock.Now()
	a.finishReleasesLocked(ctx)
	a.keepSizesLocked(ctx)
	due, ready := a.dueLocked(now)
	nodeChanges, staleNodes := a.nodeChangesLocked()
	adoptions := a.adoptionsLocked()
	a.mu.Unlock()

	for _, ad := range adoptions {
		a.adopt(ctx, ad)
	}
	a.deleteStaleNodes(ctx, staleNodes)

	for _, id := range due {
		if _, _, err := a.Apply(ctx, id, domain.Tick{}); err != nil {
			a.log.Warn("firing a deadline or retry", "instance", id, "err", err)
		}
	}
	for id, node := range ready {
		if _, _, err := a.Apply(ctx, id, domain.NodeReady{NodeName: node}); err != nil {
			a.log.Warn("promoting a joined instance", "instance", id, "node", node, "err", err)
		}
	}
	for id, ev := range nodeChanges {
		if _, _, err := a.Apply(ctx, id, ev); err != nil {
			a.log.Warn("applying a node change", "instance", id, "event", domain.EventName(ev), "err", err)
			a.mu.Lock()
			a.nodeRecheck = true // the next pass checks every Running instance again
			a.mu.Unlock()
		}
	}

	a.mu.Lock()
	if a.loaded {
		a.startCreatesLocked(ctx, a.clock.Now())
		a.startDeletesLocked(ctx)
	}
	a.mu.Unlock()

	a.publishOutbox(ctx)
	a.purge(ctx)
}

// keepSizesLocked makes each group's live count match its target: missing
// records are created (e.g. after a crash between writing the target and
// the records); surplus Pending records are cancelled. Surplus instances
// that already have a VM are left to the autoscaler.
func (a *App) keepSizesLocked(ctx context.Context) {
	for _, id := range a.sortedGroupIDsLocked() {
		g := a.groups[id]
		switch n := a.idx.live[id]; {
		case n < g.g.TargetSize:
			var revs Revisions
			a.log.Info("group below target, creating instances", "group", id, "live", n, "target", g.g.TargetSize)
			a.fillLocked(ctx, g, &revs)
		case n > g.g.TargetSize:
			live := a.liveLocked(id)
			surplus := len(live) - g.g.TargetSize
			sort.SliceStable(live, func(i, j int) bool { return cancelOrder(live[i], live[j]) })
			for _, in := range live {
				if surplus == 0 || in.State != domain.StatePending {
					break
				}
				if _, _, err := a.applyLocked(ctx, in.ID, domain.Cancel{Reason: "group above target"}); err != nil {
					a.log.Warn("cancelling a surplus instance", "instance", in.ID, "group", id, "err", err)
					continue
				}
				surplus--
			}
		}
	}
}

// dueLocked returns the instances with a deadline or retry due, and the
// Joined instances whose Node is Ready (id -> node name).
func (a *App) dueLocked(now time.Time) ([]string, map[string]string) {
	var due []string
	ready := map[string]string{}
	for id := range a.idx.active {
		in := a.insts[id].inst
		if (!in.Deadline.IsZero() && !now.Before(in.Deadline)) ||
			(!in.NextRetryAt.IsZero() && !now.Before(in.NextRetryAt) && !in.InFlight && in.State != domain.StatePending) {
			due = append(due, id)
		}
		if in.State == domain.StateJoined && a.cluster != nil {
			if n, ok := a.nodes.forInstance(in); ok && n.Ready && n.ProviderID == in.ProviderID {
				ready[id] = n.Name
			}
		}
	}
	sort.Strings(due)
	return due, ready
}

func accountKey(t domain.InstanceTemplate) string { return t.Provider + "/" + t.Account }

// startCreatesLocked forms create batches of Pending instances within the
// group's and the account's create parallelism.
func (a *App) startCreatesLocked(ctx context.Context, now time.Time) {
	perGroup := map[string]int{}
	perAccount := map[string]int{}
	pending := map[string][]domain.Instance{}
	for id := range a.idx.active {
		in := a.insts[id].inst
		g, ok := a.groups[in.Group]
		if !ok {
			continue
		}
		if in.CreateInFlight() {
			perGroup[in.Group]++
			perAccount[accountKey(g.g.Template)]++
		}
		if in.ReadyToCreate(now) {
			pending[in.Group] = append(pending[in.Group], in)
		}
	}
	for _, id := range a.sortedGroupIDsLocked() {
		ready := pending[id]
		if len(ready) == 0 {
			continue
		}
		g := a.groups[id]
		acct := accountKey(g.g.Template)
		slots := min(g.g.CreateParallelism(a.opts.CreateParallelism)-perGroup[id],
			a.opts.AccountCreateParallelism-perAccount[acct])
		if slots <= 0 {
			continue
		}
		if a.lingerLocked(id, now, slots, len(ready), perGroup[id]) {
			continue
		}
		sort.Slice(ready, func(i, j int) bool {
			if !ready[i].CreatedAt.Equal(ready[j].CreatedAt) {
				return ready[i].CreatedAt.Before(ready[j].CreatedAt)
			}
			return ready[i].ID < ready[j].ID
		})
		ready = ready[:min(len(ready), slots)]
		for len(ready) > 0 {
			n := min(len(ready), a.opts.MaxBatch)
			batch := ready[:n]
			ready = ready[n:]
			batchID := "b-" + a.random(16)
			token := domain.NewClientToken(batchID)
			started := 0
			for _, in := range batch {
				if _, _, err := a.applyLocked(ctx, in.ID, domain.StartCreate{BatchID: batchID, ClientToken: token}); err != nil {
					a.log.Warn("adding an instance to a create batch", "instance", in.ID, "group", id, "err", err)
					continue
				}
				started++
			}
			perGroup[id] += started
			perAccount[acct] += started
			if started > 0 {
				a.log.Info("create batch formed", "group", id, "batch", batchID, "instances", started)
			}
		}
	}
}

// lingerLocked reports whether a group's create batch should wait for more
// free slots. While the group's own creations are in flight they finish
// (and free their slots) one by one as the cloud reports VMs running; a
// batch formed at every pass would then be a stream of small create calls,
// each costing one call of the cloud's rate limit. So a batch smaller than
// what waits (up to MaxBatch) waits up to CreateLinger for more slots. A
// batch is never delayed when nothing of the group is in flight (no slot
// will free) or when it is already as large as it can be.
func (a *App) lingerLocked(group string, now time.Time, slots, ready, inFlight int) bool {
	full := min(ready, a.opts.MaxBatch)
	if a.opts.CreateLinger <= 0 || slots >= full || inFlight == 0 {
		delete(a.lingerSince, group)
		return false
	}
	since, waiting := a.lingerSince[group]
	if !waiting {
		a.lingerSince[group] = now
		time.AfterFunc(a.opts.CreateLinger, a.Wake)
		return true
	}
	if now.Sub(since) < a.opts.CreateLinger {
		return true
	}
	delete(a.lingerSince, group)
	return false
}

// startDeletesLocked starts queued deletions within the group's and the
// account's delete parallelism.
func (a *App) startDeletesLocked(ctx context.Context) {
	perGroup := map[string]int{}
	perAccount := map[string]int{}
	queued := map[string][]domain.Instance{}
	for id := range a.idx.active {
		in := a.insts[id].inst
		g := a.groups[in.Group]
		acct := ""
		if g != nil {
			acct = accountKey(g.g.Template)
		}
		if in.DeletionActive() {
			perGroup[in.Group]++
			perAccount[acct]++
		}
		if in.AwaitingDeletionSlot() {
			queued[in.Group] = append(queued[in.Group], in)
		}
	}
	groups := make([]string, 0, len(queued))
	for id := range queued {
		groups = append(groups, id)
	}
	sort.Strings(groups)
	for _, id := range groups {
		list := queued[id]
		limit, acct := a.opts.DeleteParallelism, ""
		if g, ok := a.groups[id]; ok {
			limit = g.g.DeleteParallelism(a.opts.DeleteParallelism)
			acct = accountKey(g.g.Template)
		}
		sort.Slice(list, func(i, j int) bool {
			if !list[i].StateSince.Equal(list[j].StateSince) {
				return list[i].StateSince.Before(list[j].StateSince)
			}
			return list[i].ID < list[j].ID
		})
		for _, in := range list {
			if perGroup[id] >= limit || perAccount[acct] >= a.opts.AccountDeleteParallelism {
				break
			}
			if _, _, err := a.applyLocked(ctx, in.ID, domain.StartDelete{}); err != nil {
				a.log.Warn("starting a deletion", "instance", in.ID, "group", id, "err", err)
				continue
			}
			perGroup[id]++
			perAccount[acct]++
		}
	}
}

// purge deletes Deleted records older than the retention, a bounded batch
// per interval.
func (a *App) purge(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clock.Now()
	if !a.loaded || a.opts.DeletedRetention <= 0 || now.Sub(a.lastPurge) < a.opts.PurgeInterval {
		return
	}
	a.lastPurge = now
	var old []*instRec
	for _, r := range a.insts {
		if r.inst.State == domain.StateDeleted && now.Sub(r.inst.StateSince) > a.opts.DeletedRetention {
			old = append(old, r)
		}
	}
	sort.Slice(old, func(i, j int) bool { return old[i].inst.StateSince.Before(old[j].inst.StateSince) })
	n := 0
	for _, r := range old[:min(len(old), a.opts.PurgeBatch)] {
		if _, err := a.store.DeleteInstance(ctx, r.inst.Group, r.inst.ID, r.rev); err != nil {
			a.log.Warn("purging a deleted record", "instance", r.inst.ID, "group", r.inst.Group, "err", err)
			a.refreshInstLocked(ctx, r.inst.Group, r.inst.ID)
			continue
		}
		a.dropInstLocked(r.inst.ID)
		n++
	}
	if n > 0 {
		a.log.Info("purged deleted records", "count", n, "remaining", len(old)-n)
		a.obs.Purged(n)
	}
}
