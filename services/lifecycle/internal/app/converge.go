package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// Convergence: groups get the catalog's versions of the templates and
// hooks they name (snapshots), and the file's catalog entries are applied
// and pruned (see catalog.go).

// catalogConvergeInterval is how often the converger re-checks the groups'
// snapshots without being woken.
var catalogConvergeInterval = 30 * time.Second

// resolveGroupLocked gives an API group the catalog's versions of the
// template and hooks it names. A template or hook given by name only
// (nothing else set) must be in the catalog.
func (ct *catalog) resolveGroupLocked(g *domain.NodeGroup) error {
	t := g.Template
	if t.Name != "" && t.Provider == "" && t.Account == "" && t.Region == "" && t.ParametersJSON == "" &&
		ct.cat.entries[domain.CatalogRef{Kind: domain.KindTemplate, Name: t.Name}] == nil {
		return domain.Errorf(contract.CodeInvalidArgument, "node group %q: unknown instance template %q", g.ID, t.Name)
	}
	for _, h := range []*domain.HookSpec{g.Hooks.AfterCreated, g.Hooks.BeforeDelete} {
		if h != nil && h.Name != "" && h.Script == "" && ct.cat.entries[domain.CatalogRef{Kind: domain.KindHook, Name: h.Name}] == nil {
			return domain.Errorf(contract.CodeInvalidArgument, "node group %q: unknown hook %q", g.ID, h.Name)
		}
	}
	*g = ct.snapshotLocked(*g)
	return nil
}

// snapshotLocked returns g with the catalog's current versions of the
// template and hooks it names (those not in the catalog are kept as they
// are: inline definitions).
func (ct *catalog) snapshotLocked(g domain.NodeGroup) domain.NodeGroup {
	if g.Template.Name != "" {
		if r := ct.cat.entries[domain.CatalogRef{Kind: domain.KindTemplate, Name: g.Template.Name}]; r != nil {
			g.Template = *cloneEntry(r.e).Template
		}
	}
	for _, h := range []**domain.HookSpec{&g.Hooks.AfterCreated, &g.Hooks.BeforeDelete} {
		if *h == nil || (*h).Name == "" {
			continue
		}
		if r := ct.cat.entries[domain.CatalogRef{Kind: domain.KindHook, Name: (*h).Name}]; r != nil {
			*h = cloneEntry(r.e).Hook
		}
	}
	return g
}

// convergeLocked re-snapshots every API group whose snapshots differ from
// the catalog. Group ids whose write failed are reported in the error.
func (ct *catalog) convergeLocked(ctx context.Context, revs *Revisions) error {
	var errs []error
	if err := ct.resealLocked(ctx, revs); err != nil {
		errs = append(errs, err)
	}
	if len(ct.cat.entries) == 0 {
		return errors.Join(errs...)
	}
	for _, id := range ct.sortedGroupIDsLocked() {
		if err := ct.resnapshotLocked(ctx, id, revs); err != nil {
			errs = append(errs, fmt.Errorf("group %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

func (ct *catalog) resnapshotLocked(ctx context.Context, id string, revs *Revisions) error {
	for range ct.opts.CASRetries {
		rec, ok := ct.groups[id]
		if !ok || rec.g.Source == domain.SourceConfig {
			return nil // gone, or owned by the file
		}
		next := ct.snapshotLocked(rec.g)
		if sameDefinition(next, rec.g) {
			return nil
		}
		rev, err := ct.writeGroupLocked(ctx, rec, next)
		if errors.Is(err, ports.ErrConflict) {
			continue
		}
		if err != nil {
			return err
		}
		revs.group(rev)
		ct.log.Info("node group now uses the catalog's current template and hooks", "group", id, "template", next.Template.Name)
		return nil
	}
	return fmt.Errorf("concurrent writes kept conflicting: %w", ports.ErrConflict)
}

func (ct *catalog) wakeConverger() {
	select {
	case ct.catalogWake() <- struct{}{}:
	default:
	}
}

// ConvergeCatalog re-snapshots the API groups whose template or hooks
// differ from the catalog's current versions.
func (ct *catalog) ConvergeCatalog(ctx context.Context) error {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if !ct.loaded {
		return ErrNotLeader
	}
	var revs Revisions
	err := ct.convergeLocked(ctx, &revs)
	if revs.Groups != 0 {
		ct.Wake()
	}
	return err
}

// RunCatalogConverger converges the groups' snapshots when it starts
// (with leadership), every catalogConvergeInterval, and soon after an
// operation could not update every group, until ctx ends.
func (ct *catalog) RunCatalogConverger(ctx context.Context) error {
	t := time.NewTicker(catalogConvergeInterval)
	defer t.Stop()
	for {
		// First pass at once: a previous leader may have stopped midway.
		if err := ct.ConvergeCatalog(ctx); err != nil && !errors.Is(err, ErrNotLeader) {
			ct.log.Warn("updating node groups to the catalog's current versions failed; retrying", "err", err)
			ct.wakeConverger()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-ct.catalogWake():
			// Give a store outage a moment before retrying.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
	}
}

// applyFileCatalogLocked writes the file's accounts and templates.
func (ct *catalog) applyFileCatalogLocked(ctx context.Context) []error {
	if !ct.cat.configSet || ct.cs == nil {
		return nil
	}
	var errs []error
	for _, fe := range ct.cat.config {
		if err := ct.applyFileEntryLocked(ctx, fe); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", fe.Ref(), err))
		}
	}
	return errs
}

func (ct *catalog) applyFileEntryLocked(ctx context.Context, fe domain.CatalogEntry) error {
	fe = cloneEntry(fe)
	fe.Source = domain.SourceConfig
	ref := fe.Ref()
	for range ct.opts.CASRetries {
		cur := ct.cat.entries[ref]
		if cur != nil && cur.e.Source != domain.SourceConfig {
			ct.log.Warn("the configuration file defines a catalog entry that was created through the API; the file's definition is ignored",
				"kind", ref.Kind.String(), "name", ref.Name)
			return nil
		}
		var prev *domain.CatalogEntry
		if cur != nil {
			prev = &cur.e
		}
		if _, err := ct.sealEntryLocked(&fe, prev); err != nil {
			return err
		}
		if cur != nil && sameEntry(cur.e, fe) {
			return nil
		}
		_, err := ct.writeCatalogLocked(ctx, cur, fe)
		if errors.Is(err, ports.ErrConflict) {
			continue
		}
		if err != nil {
			return err
		}
		ct.log.Info("catalog entry written from the configuration file", "kind", ref.Kind.String(), "name", ref.Name, "created", cur == nil)
		return nil
	}
	return fmt.Errorf("concurrent writes kept conflicting: %w", ports.ErrConflict)
}

// pruneFileCatalogLocked deletes file entries that left the file once
// nothing references them (templates first, so an account whose templates
// left too can go in the same pass).
func (ct *catalog) pruneFileCatalogLocked(ctx context.Context) []error {
	cs := ct.cs
	if !ct.cat.configSet || cs == nil {
		return nil
	}
	inFile := map[domain.CatalogRef]bool{}
	for _, fe := range ct.cat.config {
		inFile[fe.Ref()] = true
	}
	var errs []error
	for _, kind := range []domain.CatalogKind{domain.KindTemplate, domain.KindHook, domain.KindAccount} {
		var refs []domain.CatalogRef
		for ref, rec := range ct.cat.entries {
			if ref.Kind == kind && rec.e.Source == domain.SourceConfig && !inFile[ref] {
				refs = append(refs, ref)
			}
		}
		slices.SortFunc(refs, func(x, y domain.CatalogRef) int { return strings.Compare(x.Name, y.Name) })
		for _, ref := range refs {
			if err := ct.inUseLocked(ref); err != nil {
				ct.log.Warn("catalog entry removed from the configuration file is still in use; it is kept until nothing uses it",
					"kind", ref.Kind.String(), "name", ref.Name, "why", err.Error())
				continue
			}
			if _, err := ct.deleteCatalogLocked(ctx, cs, ct.cat.entries[ref]); err != nil {
				errs = append(errs, err)
				continue
			}
			ct.log.Info("catalog entry removed from the configuration file deleted", "kind", ref.Kind.String(), "name", ref.Name)
		}
	}
	return errs
}

// sameEntry reports whether two entries differ only in source and time.
func sameEntry(x, y domain.CatalogEntry) bool {
	x, y = normalizeEntry(x), normalizeEntry(y)
	x.Source, y.Source = "", ""
	x.UpdatedAt, y.UpdatedAt = time.Time{}, time.Time{}
	return reflect.DeepEqual(x, y)
}

// normalizeEntry maps empty maps and slices to nil, as a store round trip does.
func normalizeEntry(e domain.CatalogEntry) domain.CatalogEntry {
	e = cloneEntry(e)
	if e.Template != nil {
		g := normalize(domain.NodeGroup{Template: *e.Template})
		e.Template = &g.Template
	}
	if e.Hook != nil {
		g := normalize(domain.NodeGroup{Hooks: domain.Hooks{AfterCreated: e.Hook}})
		e.Hook = g.Hooks.AfterCreated
	}
	if e.Account != nil {
		if len(e.Account.Regions) == 0 {
			e.Account.Regions = nil
		}
		if len(e.Account.SealedCredentials) == 0 {
			e.Account.SealedCredentials = nil
		}
	}
	return e
}

// cloneEntry deep-copies an entry, so cached entries are never aliased.
func cloneEntry(e domain.CatalogEntry) domain.CatalogEntry {
	if e.Template != nil {
		t := *e.Template
		t.HookEnv = maps.Clone(t.HookEnv)
		t.SecretParameters = maps.Clone(t.SecretParameters)
		t.Offerings = slices.Clone(t.Offerings)
		e.Template = &t
	}
	if e.Account != nil {
		acct := *e.Account
		acct.Regions = slices.Clone(acct.Regions)
		acct.SealedCredentials = slices.Clone(acct.SealedCredentials)
		e.Account = &acct
	}
	if e.Hook != nil {
		h := *e.Hook
		h.Env = maps.Clone(h.Env)
		e.Hook = &h
	}
	return e
}
