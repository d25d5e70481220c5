package app

import (
	"context"
	"sort"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// scheduler is the dispatcher: its pass keeps group sizes, fires
// deadlines and retries, starts creations and deletions within their
// parallelism, and publishes the outbox (outbox.go), over the index of
// instances with work (index.go).
type scheduler struct {
	*cache
	nodes *nodes
	req   *requests
	// lingerSince is when a group's create batch started waiting for more
	// free slots (see Options.CreateLinger).
	lingerSince map[string]time.Time
	lastPurge   time.Time
	// purgeBacklog: the last purge left records past the retention (more
	// than a batch), so the next pass purges again without waiting for
	// the interval.
	purgeBacklog bool
}

func newScheduler(c *cache, n *nodes, r *requests) *scheduler {
	return &scheduler{cache: c, nodes: n, req: r,
		lingerSince: map[string]time.Time{}}
}

// RunDispatcher drives every instance towards its next step until ctx
// ends. It is level-triggered: each pass looks at every record that can
// have work (the index of instances not at rest, kept on every change), so
// a missed wake-up only delays work until the next tick.
func (sc *scheduler) RunDispatcher(ctx context.Context) error {
	t := time.NewTicker(sc.opts.TickInterval)
	defer t.Stop()
	for {
		sc.Pass(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-sc.wake:
		case <-t.C:
		}
	}
}

// Pass runs one dispatcher pass: keep group sizes, fire deadlines and
// retries, promote Ready nodes, start creations and deletions within
// parallelism, publish outstanding commands and purge old records.
func (sc *scheduler) Pass(ctx context.Context) {
	sc.mu.Lock()
	if !sc.loaded {
		sc.mu.Unlock()
		return
	}
	now := sc.clock.Now()
	sc.req.finishReleasesLocked(ctx)
	sc.keepSizesLocked(ctx)
	due, ready := sc.dueLocked(now)
	nodeChanges, staleNodes := sc.nodes.nodeChangesLocked()
	sc.boundEventsLocked(&due, nodeChanges)
	adoptions := sc.nodes.adoptionsLocked()
	sc.mu.Unlock()

	for _, ad := range adoptions {
		sc.nodes.adopt(ctx, ad)
	}
	sc.nodes.deleteStaleNodes(ctx, staleNodes)

	for _, id := range due {
		if _, _, err := sc.Apply(ctx, id, domain.Tick{}); err != nil {
			sc.log.Warn("firing a deadline or retry", "instance", id, "err", err)
		}
	}
	for id, node := range ready {
		if _, _, err := sc.Apply(ctx, id, domain.NodeReady{NodeName: node}); err != nil {
			sc.log.Warn("promoting a joined instance", "instance", id, "node", node, "err", err)
		}
	}
	for id, ev := range nodeChanges {
		if _, _, err := sc.Apply(ctx, id, ev); err != nil {
			sc.log.Warn("applying a node change", "instance", id, "event", domain.EventName(ev), "err", err)
			sc.mu.Lock()
			sc.nodes.nodeRecheck = true // the next pass checks every Running instance again
			sc.mu.Unlock()
		}
	}

	sc.mu.Lock()
	if sc.loaded {
		sc.startCreatesLocked(ctx, sc.clock.Now())
		sc.startDeletesLocked(ctx)
	}
	sc.mu.Unlock()

	sc.publishOutbox(ctx)
	sc.purge(ctx)
}

// boundEventsLocked keeps at most MaxEventsPerPass of the deadlines and
// node changes a pass applies (one store write each), the first due
// first: a backlog (a new leader's first check of every Running instance
// against the Nodes, a deadline shared by thousands) must not hold back
// the creations, deletions and commands of the pass behind it for
// minutes. The rest are found again by the next pass, run at once.
func (sc *scheduler) boundEventsLocked(due *[]string, nodeChanges map[string]domain.Event) {
	limit := sc.opts.MaxEventsPerPass
	if limit <= 0 || len(*due)+len(nodeChanges) <= limit {
		return
	}
	if len(*due) > limit {
		*due = (*due)[:limit]
	}
	left := limit - len(*due)
	for id := range nodeChanges {
		if left > 0 {
			left--
			continue
		}
		delete(nodeChanges, id)
	}
	// The node changes left out are found by checking every instance.
	sc.nodes.nodeRecheck = true
	sc.Wake()
}

// keepSizesLocked makes each group's live count match its target: missing
// records are created (e.g. after a crash between writing the target and
// the records); surplus Pending records are cancelled. Surplus instances
// that already have a VM are left to the autoscaler.
func (sc *scheduler) keepSizesLocked(ctx context.Context) {
	for _, id := range sc.sortedGroupIDsLocked() {
		g := sc.groups[id]
		switch n := sc.idx.live[id]; {
		case n < g.g.TargetSize:
			var revs Revisions
			sc.log.Info("group below target, creating instances", "group", id, "live", n, "target", g.g.TargetSize)
			sc.fillLocked(ctx, g, &revs)
		case n > g.g.TargetSize:
			live := sc.liveLocked(id)
			surplus := len(live) - g.g.TargetSize
			domain.SortForCancel(live)
			for _, in := range live {
				if surplus == 0 || in.State != domain.StatePending {
					break
				}
				if _, _, err := sc.applyLocked(ctx, in.ID, domain.Cancel{Reason: "group above target"}); err != nil {
					sc.log.Warn("cancelling a surplus instance", "instance", in.ID, "group", id, "err", err)
					continue
				}
				surplus--
			}
		}
	}
}

// dueLocked returns the instances with a deadline or retry due, and the
// Joined instances whose Node is Ready (id -> node name).
func (sc *scheduler) dueLocked(now time.Time) ([]string, map[string]string) {
	var due []string
	ready := map[string]string{}
	for id := range sc.idx.active {
		in := sc.insts[id].Instance
		if (!in.Deadline.IsZero() && !now.Before(in.Deadline)) ||
			(!in.NextRetryAt.IsZero() && !now.Before(in.NextRetryAt) && !in.InFlight && in.State != domain.StatePending) {
			due = append(due, id)
		}
		if in.State == domain.StateJoined && sc.cluster != nil {
			if n, ok := sc.known.forInstance(in); ok && n.Ready && n.ProviderID == in.ProviderID {
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
func (sc *scheduler) startCreatesLocked(ctx context.Context, now time.Time) {
	perGroup := map[string]int{}
	perAccount := map[string]int{}
	pending := map[string][]domain.Instance{}
	for id := range sc.idx.active {
		in := sc.insts[id].Instance
		g, ok := sc.groups[in.Group]
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
	for _, id := range sc.sortedGroupIDsLocked() {
		ready := pending[id]
		if len(ready) == 0 {
			continue
		}
		g := sc.groups[id]
		acct := accountKey(g.g.Template)
		slots := min(g.g.CreateParallelism(sc.opts.CreateParallelism)-perGroup[id],
			sc.opts.AccountCreateParallelism-perAccount[acct])
		if slots <= 0 {
			continue
		}
		if sc.lingerLocked(id, now, slots, len(ready), perGroup[id]) {
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
			n := min(len(ready), sc.opts.MaxBatch)
			batch := ready[:n]
			ready = ready[n:]
			batchID := sc.offeringOrderLocked(g.g, "b-"+sc.random(16))
			token := domain.NewClientToken(batchID)
			started := 0
			for _, in := range batch {
				if _, _, err := sc.applyLocked(ctx, in.ID, domain.StartCreate{BatchID: batchID, ClientToken: token}); err != nil {
					sc.log.Warn("adding an instance to a create batch", "instance", in.ID, "group", id, "err", err)
					continue
				}
				started++
			}
			perGroup[id] += started
			perAccount[acct] += started
			if started > 0 {
				sc.log.Info("create batch formed", "group", id, "batch", batchID, "instances", started)
			}
		}
	}
}

// offeringOrderLocked returns the id of a new batch of the group, with the
// order its create command tries the template's offerings in (balanced:
// the zones with the fewest live instances of the group first) when that
// is not the written order.
func (sc *scheduler) offeringOrderLocked(g domain.NodeGroup, batchID string) string {
	t := g.Template
	if len(t.Offerings) < 2 || t.OfferingStrategy != cloudspec.StrategyBalanced {
		return batchID
	}
	live := domain.LiveByZone(func(yield func(*domain.Instance) bool) {
		for id := range sc.idx.byGroup[g.ID] {
			if !yield(&sc.insts[id].Instance) {
				return
			}
		}
	})
	return domain.WithOfferingOrder(batchID, domain.OfferingOrder(t.OfferingStrategy, t.Offerings, live))
}

// lingerLocked reports whether a group's create batch should wait for more
// free slots. While the group's own creations are in flight they finish
// (and free their slots) one by one as the cloud reports VMs running; a
// batch formed at every pass would then be a stream of small create calls,
// each costing one call of the cloud's rate limit. So a batch smaller than
// what waits (up to MaxBatch) waits up to CreateLinger for more slots. A
// batch is never delayed when nothing of the group is in flight (no slot
// will free) or when it is already as large as it can be.
func (sc *scheduler) lingerLocked(group string, now time.Time, slots, ready, inFlight int) bool {
	full := min(ready, sc.opts.MaxBatch)
	if sc.opts.CreateLinger <= 0 || slots >= full || inFlight == 0 {
		delete(sc.lingerSince, group)
		return false
	}
	since, waiting := sc.lingerSince[group]
	if !waiting {
		sc.lingerSince[group] = now
		time.AfterFunc(sc.opts.CreateLinger, sc.Wake)
		return true
	}
	if now.Sub(since) < sc.opts.CreateLinger {
		return true
	}
	delete(sc.lingerSince, group)
	return false
}

// startDeletesLocked starts queued deletions within the group's and the
// account's delete parallelism.
func (sc *scheduler) startDeletesLocked(ctx context.Context) {
	perGroup := map[string]int{}
	perAccount := map[string]int{}
	queued := map[string][]domain.Instance{}
	for id := range sc.idx.active {
		in := sc.insts[id].Instance
		g := sc.groups[in.Group]
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
		limit, acct := sc.opts.DeleteParallelism, ""
		if g, ok := sc.groups[id]; ok {
			limit = g.g.DeleteParallelism(sc.opts.DeleteParallelism)
			acct = accountKey(g.g.Template)
		}
		sort.Slice(list, func(i, j int) bool {
			if !list[i].StateSince.Equal(list[j].StateSince) {
				return list[i].StateSince.Before(list[j].StateSince)
			}
			return list[i].ID < list[j].ID
		})
		for _, in := range list {
			if perGroup[id] >= limit || perAccount[acct] >= sc.opts.AccountDeleteParallelism {
				break
			}
			if _, _, err := sc.applyLocked(ctx, in.ID, domain.StartDelete{}); err != nil {
				sc.log.Warn("starting a deletion", "instance", in.ID, "group", id, "err", err)
				continue
			}
			perGroup[id]++
			perAccount[acct]++
		}
	}
}

// purge deletes Deleted records older than the retention: a bounded
// batch per pass, every interval, and at every pass while a backlog is
// left (and the last batch made progress). One batch per interval alone
// would purge at most PurgeBatch records per PurgeInterval (14,400 a day
// by default), and a provider churning faster would keep Deleted records
// without bound.
func (sc *scheduler) purge(ctx context.Context) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	now := sc.clock.Now()
	if !sc.loaded || sc.opts.DeletedRetention <= 0 || (!sc.purgeBacklog && now.Sub(sc.lastPurge) < sc.opts.PurgeInterval) {
		return
	}
	sc.lastPurge = now
	var old []*instRec
	for _, r := range sc.insts {
		if r.Instance.State == domain.StateDeleted && now.Sub(r.Instance.StateSince) > sc.opts.DeletedRetention {
			old = append(old, r)
		}
	}
	sort.Slice(old, func(i, j int) bool { return old[i].Instance.StateSince.Before(old[j].Instance.StateSince) })
	n := 0
	for _, r := range old[:min(len(old), sc.opts.PurgeBatch)] {
		if _, err := sc.store.DeleteInstance(ctx, r.Instance.Group, r.Instance.ID, r.Revision); err != nil {
			sc.log.Warn("purging a deleted record", "instance", r.Instance.ID, "group", r.Instance.Group, "err", err)
			sc.refreshInstLocked(ctx, r.Instance.Group, r.Instance.ID)
			continue
		}
		sc.dropInstLocked(r.Instance.ID)
		n++
	}
	sc.purgeBacklog = n > 0 && len(old) > n
	if n > 0 {
		sc.log.Info("purged deleted records", "count", n, "remaining", len(old)-n)
		sc.obs.Purged(n)
	}
}
