package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/libs/providerid"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// NodeRef is a node as Cluster Autoscaler names it in DeleteNodes.
type NodeRef struct {
	ProviderID string
	Name       string
}

func (n NodeRef) String() string {
	if n.ProviderID != "" {
		return n.ProviderID
	}
	return n.Name
}

// IncreaseSize raises a group's target by delta (> 0) and creates the
// Pending records before returning, so both are visible to the caller.
func (a *App) IncreaseSize(ctx context.Context, group string, delta int) (Revisions, error) {
	return a.op(ctx, "IncreaseSize", func() (Revisions, error) {
		var revs Revisions
		if delta <= 0 {
			return revs, domain.Errorf(contract.CodeInvalidArgument, "delta must be positive, got %d", delta)
		}
		g, err := a.groupLocked(group)
		if err != nil {
			return revs, err
		}
		if g.g.TargetSize+delta > g.g.MaxSize {
			return revs, domain.Errorf(contract.CodeOutOfRange, "size increase too large: target %d + %d exceeds max size %d of %q",
				g.g.TargetSize, delta, g.g.MaxSize, group)
		}
		if err := a.setTargetLocked(ctx, g, g.g.TargetSize+delta, &revs); err != nil {
			return revs, err
		}
		a.fillLocked(ctx, g, &revs)
		return revs, nil
	})
}

// DecreaseTargetSize lowers a group's target by -delta (delta < 0) by
// cancelling capacity that has not become a node: Pending records first,
// then instances whose creation failed, then the least advanced ones. It
// never touches an instance with a registered Node and fails, changing
// nothing, if that is not enough.
func (a *App) DecreaseTargetSize(ctx context.Context, group string, delta int) (Revisions, error) {
	return a.op(ctx, "DecreaseTargetSize", func() (Revisions, error) {
		if delta >= 0 {
			return Revisions{}, domain.Errorf(contract.CodeInvalidArgument, "delta must be negative, got %d", delta)
		}
		g, err := a.groupLocked(group)
		if err != nil {
			return Revisions{}, err
		}
		return a.decreaseLocked(ctx, g, g.g.TargetSize+delta, "DecreaseTargetSize")
	})
}

func (a *App) decreaseLocked(ctx context.Context, g *groupRec, target int, why string) (Revisions, error) {
	var revs Revisions
	if target < g.g.MinSize {
		return revs, domain.Errorf(contract.CodeOutOfRange, "target %d would be below min size %d of %q", target, g.g.MinSize, g.g.ID)
	}
	live := a.liveLocked(g.g.ID)
	var candidates []domain.Instance
	registered := 0
	for _, in := range live {
		if a.registeredLocked(in) {
			registered++
		} else {
			candidates = append(candidates, in)
		}
	}
	excess := len(live) - target
	if target < registered {
		return revs, domain.Errorf(contract.CodeFailedPrecondition,
			"cannot decrease %q to %d: %d instances have registered nodes (delete nodes instead); %d unregistered can be cancelled",
			g.g.ID, target, registered, len(candidates))
	}
	sort.SliceStable(candidates, func(i, j int) bool { return cancelOrder(candidates[i], candidates[j]) })
	noteRelease(ctx, candidates[:max(0, excess)], false)
	if err := a.setTargetLocked(ctx, g, target, &revs); err != nil {
		return revs, err
	}
	var errs []error
	for _, in := range candidates[:max(0, excess)] {
		var ev domain.Event = domain.DeleteRequested{Reason: why}
		if in.State == domain.StatePending {
			ev = domain.Cancel{Reason: why}
		}
		_, rev, err := a.applyLocked(ctx, in.ID, ev)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		revs.inst(rev)
	}
	if len(errs) > 0 {
		a.restoreTargetLocked(ctx, g, len(errs), &revs)
		return revs, &domain.Error{Code: contract.CodeUnavailable,
			Msg: fmt.Sprintf("cancelling %d instances of %s failed", len(errs), g.g.ID),
			Err: opaque(errors.Join(errs...))}
	}
	return revs, nil
}

// cancelOrder puts the cheapest capacity to give up first.
func cancelOrder(x, y domain.Instance) bool {
	rank := func(in domain.Instance) int {
		switch {
		case in.State == domain.StatePending:
			return 0
		case in.CreationFailed:
			return 1
		}
		return int(in.State) + 1
	}
	if rank(x) != rank(y) {
		return rank(x) < rank(y)
	}
	return x.CreatedAt.After(y.CreatedAt) // newest first
}

// resolveLocked finds the instance CA means by a node: by exact providerID
// (real or placeholder), by a placeholder's instance id, or by node name.
func (a *App) resolveLocked(n NodeRef) (domain.Instance, bool) {
	if id, ok := a.byProvider[n.ProviderID]; ok && n.ProviderID != "" {
		if r, ok := a.insts[id]; ok {
			return r.inst, true
		}
	}
	if _, id, ok := providerid.ParsePlaceholder(n.ProviderID); ok {
		if r, ok := a.insts[id]; ok {
			return r.inst, true
		}
	}
	for _, name := range []string{n.Name, n.ProviderID} {
		if name == "" {
			continue
		}
		if r, ok := a.insts[name]; ok {
			return r.inst, true
		}
	}
	if n.Name != "" {
		for _, r := range a.insts {
			if r.inst.NodeName == n.Name {
				return r.inst, true
			}
		}
	}
	return domain.Instance{}, false
}

// DeleteNodes starts the deletion of the given nodes of a group and lowers
// its target by their number. Nodes already being deleted are accepted and
// change nothing (CA repeats calls). A node of another group or an unknown
// node fails the whole call before anything is written. The target never
// goes below the min size: an instance whose creation failed is then
// replaced instead (deleted without lowering the target); any other node
// fails the call.
func (a *App) DeleteNodes(ctx context.Context, group string, nodes []NodeRef) (Revisions, error) {
	return a.op(ctx, "DeleteNodes", func() (Revisions, error) {
		var revs Revisions
		g, err := a.groupLocked(group)
		if err != nil {
			return revs, err
		}
		if len(nodes) == 0 {
			return revs, domain.Errorf(contract.CodeInvalidArgument, "no nodes given")
		}
		var release []domain.Instance
		seen := map[string]bool{}
		var problems []string
		notFound := false
		for _, n := range nodes {
			in, ok := a.resolveLocked(n)
			switch {
			case !ok:
				notFound = true
				problems = append(problems, fmt.Sprintf("node %s is not an instance of any node group", n))
			case in.Group != group:
				problems = append(problems, fmt.Sprintf("node %s belongs to node group %q, not %q", n, in.Group, group))
			case seen[in.ID] || !in.Live():
				// Already requested (in this call or before): idempotent.
			default:
				seen[in.ID] = true
				release = append(release, in)
			}
		}
		if len(problems) > 0 {
			code := contract.CodeInvalidArgument
			if notFound && len(problems) == 1 {
				code = contract.CodeNotFound
			}
			return revs, domain.Errorf(code, "%s", strings.Join(problems, "; "))
		}
		if len(release) == 0 {
			return revs, nil
		}
		var failed, normal int
		for _, in := range release {
			if in.CreationFailed {
				failed++
			} else {
				normal++
			}
		}
		room := g.g.TargetSize - g.g.MinSize
		if normal > room {
			return revs, domain.Errorf(contract.CodeOutOfRange,
				"deleting %d nodes would take %q below its min size %d (target %d)", len(release), group, g.g.MinSize, g.g.TargetSize)
		}
		decrease := normal + min(failed, room-normal)
		noteRelease(ctx, release, false)
		if err := a.setTargetLocked(ctx, g, g.g.TargetSize-decrease, &revs); err != nil {
			return revs, err
		}
		if replaced := len(release) - decrease; replaced > 0 {
			a.log.Info("deleting failed instances at min size: they will be replaced", "group", group, "replaced", replaced)
		}
		var errs []error
		for _, in := range release {
			_, rev, err := a.applyLocked(ctx, in.ID, domain.DeleteRequested{Reason: "DeleteNodes"})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			revs.inst(rev)
		}
		if len(errs) > 0 {
			// Give the unreleased nodes their place in the target back, so a
			// retry of the call (which releases them) lowers it only once.
			a.restoreTargetLocked(ctx, g, len(errs), &revs)
			return revs, &domain.Error{Code: contract.CodeUnavailable,
				Msg: fmt.Sprintf("releasing %d of %d nodes of %s failed", len(errs), len(release), group),
				Err: opaque(errors.Join(errs...))}
		}
		return revs, nil
	})
}

// SetTargetSize sets a group's target (admin API) within [min, max]:
// raising it creates Pending records, lowering it behaves like
// DecreaseTargetSize.
func (a *App) SetTargetSize(ctx context.Context, group string, target int) (Revisions, error) {
	return a.op(ctx, "SetTargetSize", func() (Revisions, error) {
		var revs Revisions
		g, err := a.groupLocked(group)
		if err != nil {
			return revs, err
		}
		if target < g.g.MinSize || target > g.g.MaxSize {
			return revs, domain.Errorf(contract.CodeOutOfRange, "target %d outside [%d, %d] of %q", target, g.g.MinSize, g.g.MaxSize, group)
		}
		if target < g.g.TargetSize {
			return a.decreaseLocked(ctx, g, target, "SetTargetSize")
		}
		if err := a.setTargetLocked(ctx, g, target, &revs); err != nil {
			return revs, err
		}
		a.fillLocked(ctx, g, &revs)
		return revs, nil
	})
}

// PutGroupRequest creates or replaces a group through the admin API.
type PutGroupRequest struct {
	Group domain.NodeGroup
	// ExpectedRevision zero: create only if absent (unless Upsert).
	// Otherwise the revision the caller read.
	ExpectedRevision uint64
	Upsert           bool
}

// PutGroup creates or replaces an API-managed group. The runtime target of
// an existing group is kept (clamped into the new bounds); a new group
// starts at the given target. Groups defined in the configuration file
// cannot be changed here (the file owns them).
func (a *App) PutGroup(ctx context.Context, req PutGroupRequest) (Revisions, error) {
	return a.op(ctx, "PutGroup", func() (Revisions, error) {
		var revs Revisions
		g := req.Group
		g.Source = domain.SourceAPI
		if err := a.resolveGroupLocked(&g); err != nil {
			return revs, err
		}
		if g.Template.Provider == "" {
			g.Template.Provider = DefaultProvider
		}
		cur, exists := a.groups[g.ID]
		if exists {
			g.TargetSize = g.ClampTarget(cur.g.TargetSize)
		}
		if errs := g.Validate(); len(errs) > 0 {
			msgs := make([]string, len(errs))
			for i, e := range errs {
				msgs[i] = e.Error()
			}
			return revs, domain.Errorf(contract.CodeInvalidArgument, "invalid node group: %s", strings.Join(msgs, "; "))
		}
		switch {
		case exists && cur.g.Source == domain.SourceConfig:
			return revs, domain.Errorf(contract.CodeFailedPrecondition, "node group %q is defined in the configuration file; change it there", g.ID)
		case exists && req.ExpectedRevision == 0 && !req.Upsert:
			return revs, domain.Errorf(contract.CodeAlreadyExists, "node group %q already exists", g.ID)
		case exists && req.ExpectedRevision != 0 && req.ExpectedRevision != cur.rev:
			return revs, domain.Errorf(contract.CodeAborted, "node group %q changed: revision %d, expected %d", g.ID, cur.rev, req.ExpectedRevision)
		case !exists && req.ExpectedRevision != 0:
			return revs, domain.Errorf(contract.CodeNotFound, "node group %q not found", g.ID)
		}
		if exists {
			rev, err := a.writeGroupLocked(ctx, cur, g)
			if err != nil {
				return revs, err
			}
			revs.group(rev)
		} else {
			g.UpdatedAt = a.clock.Now()
			g.Applied = a.appliedForWriteLocked(ctx, nil)
			rev, err := a.store.CreateGroup(ctx, g)
			if err != nil {
				if errors.Is(err, ports.ErrConflict) {
					a.refreshGroupLocked(ctx, g.ID)
				}
				return revs, err
			}
			rec := a.setGroupLocked(g, rev)
			revs.group(rev)
			a.fillLocked(ctx, rec, &revs)
		}
		a.log.Info("node group stored", "group", g.ID, "source", g.Source, "created", !exists)
		return revs, nil
	})
}

// DefaultProvider is the cloud provider of templates that name none.
const DefaultProvider = cloudspec.DefaultProvider

// DeleteGroup deletes an API-managed group that has no instances left
// (Deleted records excepted).
func (a *App) DeleteGroup(ctx context.Context, id string, expectedRevision uint64) (Revisions, error) {
	return a.op(ctx, "DeleteGroup", func() (Revisions, error) {
		var revs Revisions
		g, err := a.groupLocked(id)
		if err != nil {
			return revs, err
		}
		if g.g.Source == domain.SourceConfig {
			return revs, domain.Errorf(contract.CodeFailedPrecondition, "node group %q is defined in the configuration file; remove it there", id)
		}
		if expectedRevision != 0 && expectedRevision != g.rev {
			return revs, domain.Errorf(contract.CodeAborted, "node group %q changed: revision %d, expected %d", id, g.rev, expectedRevision)
		}
		if n := a.activeCountLocked(id); n > 0 {
			return revs, domain.Errorf(contract.CodeFailedPrecondition, "node group %q still has %d instances; scale it to zero first", id, n)
		}
		rev, err := a.store.DeleteGroup(ctx, id, g.rev)
		if err != nil {
			if errors.Is(err, ports.ErrConflict) {
				a.refreshGroupLocked(ctx, id)
			}
			return revs, err
		}
		a.dropGroupLocked(id)
		revs.group(rev)
		a.log.Info("node group deleted", "group", id)
		return revs, nil
	})
}

// InstanceAction is an operator action on one instance.
type InstanceAction int

// Instance actions.
const (
	// ActionRetry re-drives the current step now (clears backoff and a
	// creation failure).
	ActionRetry InstanceAction = iota + 1
	// ActionForceDelete deletes the instance, skipping the before_delete
	// hook; a live instance also lowers the target (or is replaced at min size).
	ActionForceDelete
	// ActionCancel drops a Pending instance and lowers the target.
	ActionCancel
)

// ActOnInstance performs an operator action.
func (a *App) ActOnInstance(ctx context.Context, id string, action InstanceAction) (Revisions, error) {
	return a.op(ctx, "InstanceAction", func() (Revisions, error) {
		var revs Revisions
		r, ok := a.insts[id]
		if !ok {
			return revs, domain.Errorf(contract.CodeNotFound, "instance %q not found", id)
		}
		in := r.inst
		var ev domain.Event
		switch action {
		case ActionRetry:
			ev = domain.Retry{}
		case ActionForceDelete:
			if in.State == domain.StateDeleting || in.State == domain.StateDeleted {
				return revs, domain.Errorf(contract.CodeFailedPrecondition, "instance %q is already %s", id, in.State)
			}
			ev = domain.DeleteRequested{Reason: "force-deleted by an operator", Force: true}
		case ActionCancel:
			if in.State != domain.StatePending {
				return revs, domain.Errorf(contract.CodeFailedPrecondition, "instance %q is %s; only Pending instances can be cancelled", id, in.State)
			}
			ev = domain.Cancel{Reason: "cancelled by an operator"}
		default:
			return revs, domain.Errorf(contract.CodeInvalidArgument, "unknown action %d", action)
		}
		if action != ActionRetry && in.Live() {
			g, err := a.groupLocked(in.Group)
			if err != nil {
				return revs, err
			}
			switch {
			case g.g.TargetSize > g.g.MinSize:
				noteRelease(ctx, []domain.Instance{in}, action == ActionForceDelete)
				if err := a.setTargetLocked(ctx, g, g.g.TargetSize-1, &revs); err != nil {
					return revs, err
				}
			case action == ActionCancel:
				return revs, domain.Errorf(contract.CodeOutOfRange, "cancelling would take %q below its min size %d", in.Group, g.g.MinSize)
			default:
				a.log.Info("force-deleting at min size: the instance will be replaced", "instance", id, "group", in.Group)
			}
		}
		_, rev, err := a.applyLocked(ctx, id, ev)
		if err != nil && revs.Groups != 0 {
			a.restoreTargetLocked(ctx, a.groups[in.Group], 1, &revs)
		}
		if errors.Is(err, domain.ErrInvalidTransition) {
			return revs, &domain.Error{Code: contract.CodeFailedPrecondition, Msg: "instance " + id, Err: err}
		}
		if err != nil {
			return revs, &domain.Error{Code: contract.CodeUnavailable, Msg: "instance " + id, Err: opaque(err)}
		}
		revs.inst(rev)
		return revs, nil
	})
}

// Group returns a group's current definition.
func (a *App) Group(id string) (domain.NodeGroup, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	g, ok := a.groups[id]
	if !ok {
		return domain.NodeGroup{}, false
	}
	return g.g, true
}

// Instances returns a snapshot of the cached instances of group ("" = all),
// sorted by id.
func (a *App) Instances(group string) []domain.Instance {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []domain.Instance
	for _, r := range a.insts {
		if group == "" || r.inst.Group == group {
			out = append(out, r.inst)
		}
	}
	slices.SortFunc(out, func(x, y domain.Instance) int { return strings.Compare(x.ID, y.ID) })
	return out
}

// restoreTargetLocked raises a group's target by n after a partly failed
// release (best effort: on failure the dispatcher's reconciliation and the
// caller's retry bring the group back in line). A release whose request the
// group records is not undone but finished (requests.go).
func (a *App) restoreTargetLocked(ctx context.Context, g *groupRec, n int, revs *Revisions) {
	if g == nil {
		return
	}
	if requestRecorded(ctx) {
		// The group records the request: the release counts as applied
		// and is finished by the next pass or the repeat (requests.go).
		return
	}
	if err := a.setTargetLocked(ctx, g, g.g.ClampTarget(g.g.TargetSize+n), revs); err != nil {
		a.log.Error("restoring the target after a failed release", "group", g.g.ID, "err", err)
	}
}
