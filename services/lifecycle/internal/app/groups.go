package app

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// The admin API's group and instance operations.

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
		in := r.Instance
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
		if group == "" || r.Instance.Group == group {
			out = append(out, r.Instance)
		}
	}
	slices.SortFunc(out, func(x, y domain.Instance) int { return strings.Compare(x.ID, y.ID) })
	return out
}
