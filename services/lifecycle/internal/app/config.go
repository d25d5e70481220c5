package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// SetConfig records the latest valid file configuration; it is applied now
// when leading (see ApplyConfig), else at the next Start.
func (a *App) SetConfig(ctx context.Context, groups []domain.NodeGroup) error {
	a.mu.Lock()
	a.configGroups = slices.Clone(groups)
	if a.configGroups == nil {
		a.configGroups = []domain.NodeGroup{}
	}
	loaded := a.loaded
	a.mu.Unlock()
	if !loaded {
		return nil
	}
	return a.ApplyConfig(ctx, groups)
}

// ApplyConfig makes the stored groups match the configuration file.
//
// What wins between the file and the admin API:
//   - A group defined in the file is owned by the file: at start and on
//     every reload its definition (size bounds, templates, node template,
//     hooks, parallelism, options) is replaced by the file's. Its runtime
//     target size is never reset: the file's targetSize is only the initial
//     target when the group is first created; afterwards the target is only
//     clamped into new [minSize, maxSize] bounds. The admin API cannot
//     change or delete a file group (FailedPrecondition), but CA and the
//     admin API may set its target.
//   - A group created through the API (source "api") is never touched by
//     the file; a file group with the same id is ignored with a warning.
//   - A file group that disappears from the file is deleted once it has no
//     instances left (Deleted records excepted); until then it is kept, with
//     a warning, so its instances can still be driven to the end.
func (a *App) ApplyConfig(ctx context.Context, groups []domain.NodeGroup) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.loaded {
		return ErrNotLeader
	}
	// The file's accounts and templates first: groups may name them.
	errs := a.applyFileCatalogLocked(ctx)
	inFile := map[string]bool{}
	for _, fg := range groups {
		inFile[fg.ID] = true
		if err := a.applyFileGroupLocked(ctx, fg); err != nil {
			errs = append(errs, fmt.Errorf("group %s: %w", fg.ID, err))
		}
	}
	ids := slices.Sorted(maps.Keys(a.groups))
	for _, id := range ids {
		g := a.groups[id]
		if g.g.Source != domain.SourceConfig || inFile[id] {
			continue
		}
		if n := a.activeCountLocked(id); n > 0 {
			a.log.Warn("node group removed from the configuration file still has instances; it is kept until they are gone (set its target to its min size or delete its nodes)",
				"group", id, "instances", n)
			continue
		}
		if _, err := a.store.DeleteGroup(ctx, id, g.rev); err != nil {
			errs = append(errs, fmt.Errorf("deleting group %s removed from the file: %w", id, err))
			if errors.Is(err, ports.ErrConflict) {
				a.refreshGroupLocked(ctx, id)
			}
			continue
		}
		a.dropGroupLocked(id)
		a.log.Info("node group removed from the configuration file deleted", "group", id)
	}
	errs = append(errs, a.pruneFileCatalogLocked(ctx)...)
	// API groups follow the catalog: this also finishes a re-snapshot that
	// a crash interrupted.
	if err := a.convergeLocked(ctx, &Revisions{}); err != nil {
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	a.obs.ConfigApplied(err)
	a.Wake()
	return err
}

func (a *App) applyFileGroupLocked(ctx context.Context, fg domain.NodeGroup) error {
	fg.Source = domain.SourceConfig
	for range a.opts.CASRetries {
		cur, exists := a.groups[fg.ID]
		var prev *domain.NodeGroup
		if exists {
			prev = &cur.g
		}
		if _, err := a.sealGroupLocked(&fg, prev); err != nil {
			return err
		}
		if !exists {
			g := fg
			g.TargetSize = g.ClampTarget(fg.TargetSize)
			g.UpdatedAt = a.clock.Now()
			rev, err := a.store.CreateGroup(ctx, g)
			if errors.Is(err, ports.ErrConflict) {
				a.refreshGroupLocked(ctx, fg.ID)
				continue
			}
			if err != nil {
				return err
			}
			a.setGroupLocked(g, rev)
			a.log.Info("node group created from the configuration file", "group", g.ID, "target", g.TargetSize)
			return nil
		}
		if cur.g.Source != domain.SourceConfig {
			a.log.Warn("the configuration file defines a node group that was created through the API; the file's definition is ignored",
				"group", fg.ID)
			return nil
		}
		g := fg
		g.TargetSize = g.ClampTarget(cur.g.TargetSize)
		if sameDefinition(g, cur.g) && g.TargetSize == cur.g.TargetSize {
			return nil
		}
		if _, err := a.writeGroupLocked(ctx, cur, g); err != nil {
			if errors.Is(err, ports.ErrConflict) {
				continue
			}
			return err
		}
		a.log.Info("node group updated from the configuration file", "group", g.ID, "target", g.TargetSize)
		return nil
	}
	return fmt.Errorf("concurrent writes kept conflicting: %w", ports.ErrConflict)
}

// sameDefinition reports whether two groups differ only in what the file
// does not own (target, source, timestamp, applied requests).
func sameDefinition(x, y domain.NodeGroup) bool {
	x, y = normalize(x), normalize(y)
	x.TargetSize, y.TargetSize = 0, 0
	x.Applied, y.Applied = nil, nil
	x.UpdatedAt, y.UpdatedAt = time.Time{}, time.Time{}
	x.Source, y.Source = "", ""
	return reflect.DeepEqual(x, y)
}

// normalize maps empty maps and slices to nil, as a store round trip does.
func normalize(g domain.NodeGroup) domain.NodeGroup {
	nm := func(m map[string]string) map[string]string {
		if len(m) == 0 {
			return nil
		}
		return m
	}
	g.Template.HookEnv = nm(g.Template.HookEnv)
	g.Template.SecretParameters = nm(g.Template.SecretParameters)
	if len(g.Template.Offerings) == 0 {
		g.Template.Offerings = nil
	}
	g.NodeTemplate.Labels = nm(g.NodeTemplate.Labels)
	g.NodeTemplate.Annotations = nm(g.NodeTemplate.Annotations)
	g.NodeTemplate.Capacity = nm(g.NodeTemplate.Capacity)
	g.NodeTemplate.Allocatable = nm(g.NodeTemplate.Allocatable)
	if len(g.NodeTemplate.Taints) == 0 {
		g.NodeTemplate.Taints = nil
	}
	for _, h := range []**domain.HookSpec{&g.Hooks.AfterCreated, &g.Hooks.BeforeDelete} {
		if *h != nil {
			c := **h
			c.Env = nm(c.Env)
			*h = &c
		}
	}
	return g
}
