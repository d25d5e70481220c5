package app

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// Revisions are the store revisions an operation wrote (0: none).
type Revisions struct {
	Groups    uint64
	Instances uint64
	Catalog   uint64
}

func (r *Revisions) group(rev uint64) { r.Groups = max(r.Groups, rev) }

func (r *Revisions) inst(rev uint64) { r.Instances = max(r.Instances, rev) }

// writeGroupLocked persists g over rec with compare-and-set. On a conflict
// the cache is refreshed from the store and the conflict returned, so the
// caller can recompute and retry.
func (c *cache) writeGroupLocked(ctx context.Context, rec *groupRec, g domain.NodeGroup) (uint64, error) {
	g.UpdatedAt = c.clock.Now()
	g.Applied = c.appliedForWriteLocked(ctx, rec.g.Applied)
	rev, err := c.store.UpdateGroup(ctx, g, rec.rev)
	if err != nil {
		if errors.Is(err, ports.ErrConflict) {
			c.refreshGroupLocked(ctx, g.ID)
		}
		return 0, err
	}
	c.setGroupLocked(g, rev)
	return rev, nil
}

func (c *cache) refreshGroupLocked(ctx context.Context, id string) {
	v, err := c.store.GetGroup(ctx, id)
	switch {
	case errors.Is(err, ports.ErrNotFound):
		c.dropGroupLocked(id)
	case err != nil:
		c.log.Warn("refreshing group after a conflict", "group", id, "err", err)
	default:
		c.setGroupLocked(v.Group, v.Revision)
	}
}

// writeInstLocked persists in (an update of an existing record).
func (c *cache) writeInstLocked(ctx context.Context, in domain.Instance) (uint64, error) {
	rec, ok := c.insts[in.ID]
	if !ok {
		return 0, fmt.Errorf("instance %s is not cached", in.ID)
	}
	rev, err := c.store.UpdateInstance(ctx, in, rec.Revision)
	if err != nil {
		if errors.Is(err, ports.ErrConflict) {
			c.refreshInstLocked(ctx, in.Group, in.ID)
		}
		return 0, fmt.Errorf("writing instance %s: %w", in.ID, err)
	}
	c.setInstLocked(in, rev)
	return rev, nil
}

func (c *cache) refreshInstLocked(ctx context.Context, group, id string) {
	v, err := c.store.GetInstance(ctx, group, id)
	switch {
	case errors.Is(err, ports.ErrNotFound):
		c.dropInstLocked(id)
	case err != nil:
		c.log.Warn("refreshing instance after a conflict", "instance", id, "err", err)
	default:
		c.setInstLocked(v.Instance, v.Revision)
	}
}

// createInstLocked creates a new Pending record for group.
func (c *cache) createInstLocked(ctx context.Context, group string) (domain.Instance, uint64, error) {
	var lastErr error
	for range 3 {
		in := domain.NewInstance(domain.NewInstanceID(group, c.random(domain.InstanceIDRandomLength)), group, c.clock.Now())
		if _, taken := c.insts[in.ID]; taken {
			continue
		}
		in.TraceContext = c.tracer.Carrier(ctx)
		rev, err := c.store.CreateInstance(ctx, in)
		if errors.Is(err, ports.ErrConflict) {
			lastErr = err // id collision with an uncached record: draw again
			continue
		}
		if err != nil {
			return domain.Instance{}, 0, fmt.Errorf("creating an instance of %s: %w", group, err)
		}
		c.setInstLocked(in, rev)
		c.created(ctx)
		c.obs.Transition(group, domain.Move{From: domain.StateUnknown, To: domain.StatePending, Reason: "created", Cause: "created"})
		return in, rev, nil
	}
	return domain.Instance{}, 0, fmt.Errorf("creating an instance of %s: no free id: %w", group, lastErr)
}

// appliedForWriteLocked returns the applied requests a group write stores
// over cur: cur with the context's request recorded, expired and surplus
// records dropped. Without a request, cur is carried over unchanged, so
// writes that rebuild a group from its definition (configuration,
// PutGroup, catalog) keep the records.
func (c *cache) appliedForWriteLocked(ctx context.Context, cur []domain.AppliedRequest) []domain.AppliedRequest {
	r := requestOf(ctx)
	if r == nil || c.opts.RequestTTL <= 0 {
		return cur
	}
	now := c.clock.Now()
	rec := domain.AppliedRequest{ID: r.id, Fingerprint: storedFingerprint(r.fingerprint), At: now, Release: slices.Clone(r.release), Force: r.force}
	r.recorded = true
	limit := c.opts.RequestsPerGroup
	if limit <= 0 {
		limit = defaultRequestsPerGroup
	}
	return domain.WithApplied(cur, rec, now, c.opts.RequestTTL, limit)
}

// setTargetLocked writes a group's new target.
func (c *cache) setTargetLocked(ctx context.Context, g *groupRec, target int, revs *Revisions) error {
	if target == g.g.TargetSize {
		return nil
	}
	next := g.g
	next.TargetSize = target
	rev, err := c.writeGroupLocked(ctx, g, next)
	if err != nil {
		return fmt.Errorf("writing target size of %s: %w", g.g.ID, err)
	}
	revs.group(rev)
	return nil
}

// fillLocked creates Pending records until the group has target live
// instances. A failure is logged, not returned: the target is already
// written and the dispatcher creates the missing records.
func (c *cache) fillLocked(ctx context.Context, g *groupRec, revs *Revisions) {
	missing := g.g.TargetSize - c.idx.live[g.g.ID]
	for range missing {
		in, rev, err := c.createInstLocked(ctx, g.g.ID)
		if err != nil {
			c.log.Warn("creating a Pending instance failed; the dispatcher will retry", "group", g.g.ID, "err", err)
			return
		}
		revs.inst(rev)
		c.log.Info("instance requested", "instance", in.ID, "group", in.Group, "target", g.g.TargetSize)
	}
}
