package app

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// NodeRef is a node as Cluster Autoscaler names it in DeleteNodes.
type NodeRef = domain.NodeRef

// IncreaseSize raises a group's target by delta (> 0) and creates the
// Pending records before returning, so both are visible to the caller.
func (a *App) IncreaseSize(ctx context.Context, group string, delta int) (Revisions, error) {
	return a.op(ctx, "IncreaseSize", func() (Revisions, error) {
		var revs Revisions
		// Checked before the lookup too: a bad delta is reported first.
		if delta <= 0 {
			return revs, domain.Errorf(contract.CodeInvalidArgument, "delta must be positive, got %d", delta)
		}
		g, err := a.groupLocked(group)
		if err != nil {
			return revs, err
		}
		if err := g.g.CheckIncrease(delta); err != nil {
			return revs, err
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
	if err := g.g.CheckDecrease(target, registered, len(candidates)); err != nil {
		return revs, err
	}
	domain.SortForCancel(candidates)
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
			in, ok := domain.ResolveNode(n, (*finder)(a.cache))
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
		decrease, err := g.g.DeleteDecrease(release)
		if err != nil {
			return revs, err
		}
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
		if err := g.g.CheckTarget(target); err != nil {
			return revs, err
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
