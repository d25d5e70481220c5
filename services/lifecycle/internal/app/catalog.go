package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// The catalog holds named instance templates, cloud accounts and hooks
// (bucket nodesmith_catalog). Node groups reference templates and hooks by
// name and keep a snapshot of them in their record (commands need the
// template without a lookup). Whenever a catalog entry changes, every
// API-managed group referencing it by name gets the new snapshot: the VMs
// it creates from then on use the new version; existing VMs are untouched.
//
// What wins between the file and the admin API follows the rule for
// groups (see ApplyConfig): the file's accounts and instance templates are
// written to the catalog with source "config" and are owned by the file
// (the admin API cannot change or delete them); an entry created through
// the API is never touched by the file (a file entry with the same name is
// ignored with a warning); a file entry that disappears from the file is
// deleted once nothing references it. Groups defined in the file take
// their templates from the file, never from the catalog. Hooks in the file
// are inline per group and are not catalog entries.
//
// Re-snapshotting is one compare-and-set write per group. Should lifecycle
// crash or the store fail between the catalog write and the last group
// write, the groups converge later: at every start (ApplyConfig), and
// every catalogConvergeInterval while leading (RunCatalogConverger).

// catalogConvergeInterval is how often the converger re-checks the groups'
// snapshots without being woken.
var catalogConvergeInterval = 30 * time.Second

type catalogRec struct {
	e   domain.CatalogEntry
	rev uint64
}

type catalogState struct {
	entries map[domain.CatalogRef]*catalogRec
	// config is the latest file catalog; configSet is false when there is
	// no configuration file (then the file removes nothing).
	config    []domain.CatalogEntry
	configSet bool
	wakeOnce  sync.Once
	wake      chan struct{}
}

// catalogStore is the store's catalog, or nil when the store has none.
func (a *App) catalogStore() ports.CatalogStore {
	cs, _ := a.store.(ports.CatalogStore)
	return cs
}

func (a *App) listCatalog(ctx context.Context) ([]ports.VersionedCatalogEntry, error) {
	cs := a.catalogStore()
	if cs == nil {
		return nil, nil
	}
	return cs.ListCatalog(ctx)
}

func (a *App) setCatalogLocked(vs []ports.VersionedCatalogEntry) {
	a.cat.entries = make(map[domain.CatalogRef]*catalogRec, len(vs))
	for _, v := range vs {
		a.cat.entries[v.Entry.Ref()] = &catalogRec{e: v.Entry, rev: v.Revision}
	}
}

func (a *App) catalogWake() chan struct{} {
	a.cat.wakeOnce.Do(func() { a.cat.wake = make(chan struct{}, 1) })
	return a.cat.wake
}

// CatalogEntry returns the cached catalog entry ref and its revision.
func (a *App) CatalogEntry(ref domain.CatalogRef) (domain.CatalogEntry, uint64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.cat.entries[ref]
	if !ok {
		return domain.CatalogEntry{}, 0, false
	}
	return r.e, r.rev, true
}

// SetConfigCatalog records the accounts and templates of the latest valid
// configuration file. They are applied with the groups, by the next
// SetConfig (or Start): call it first.
func (a *App) SetConfigCatalog(entries []domain.CatalogEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cat.config = slices.Clone(entries)
	a.cat.configSet = true
}

// PutCatalogRequest creates or replaces a catalog entry (admin API).
type PutCatalogRequest struct {
	Entry domain.CatalogEntry
	// ExpectedRevision zero: create only if absent (unless Upsert).
	// Otherwise the revision the caller read.
	ExpectedRevision uint64
	Upsert           bool
}

// PutCatalogEntry creates or replaces an API-managed template, account or
// hook, then re-snapshots the API groups that reference it by name. A
// template's account must be in the catalog (its provider and first region
// are the template's defaults). Entries from the configuration file cannot
// be changed here.
func (a *App) PutCatalogEntry(ctx context.Context, req PutCatalogRequest) (Revisions, error) {
	return a.op(ctx, "PutCatalogEntry", func() (Revisions, error) {
		var revs Revisions
		if a.catalogStore() == nil {
			return revs, domain.Errorf(contract.CodeFailedPrecondition, "this lifecycle store has no catalog")
		}
		e := cloneEntry(req.Entry)
		e.Source = domain.SourceAPI
		if err := a.completeEntryLocked(&e); err != nil {
			return revs, err
		}
		ref := e.Ref()
		if errs := e.Validate(); len(errs) > 0 {
			msgs := make([]string, len(errs))
			for i, fe := range errs {
				msgs[i] = fe.Error()
			}
			return revs, domain.Errorf(contract.CodeInvalidArgument, "invalid %s: %s", ref.Kind, strings.Join(msgs, "; "))
		}
		cur := a.cat.entries[ref]
		switch {
		case cur != nil && cur.e.Source == domain.SourceConfig:
			return revs, domain.Errorf(contract.CodeFailedPrecondition, "%s is defined in the configuration file; change it there", ref)
		case cur != nil && req.ExpectedRevision == 0 && !req.Upsert:
			return revs, domain.Errorf(contract.CodeAlreadyExists, "%s already exists", ref)
		case cur != nil && req.ExpectedRevision != 0 && req.ExpectedRevision != cur.rev:
			return revs, domain.Errorf(contract.CodeAborted, "%s changed: revision %d, expected %d", ref, cur.rev, req.ExpectedRevision)
		case cur == nil && req.ExpectedRevision != 0:
			return revs, domain.Errorf(contract.CodeNotFound, "%s not found", ref)
		}
		rev, err := a.writeCatalogLocked(ctx, cur, e)
		if err != nil {
			return revs, err
		}
		revs.Catalog = rev
		a.log.Info("catalog entry stored", "kind", ref.Kind.String(), "name", ref.Name, "created", cur == nil, "revision", rev)
		if err := a.convergeLocked(ctx, &revs); err != nil {
			// The entry is stored; the groups catch up in the background.
			a.log.Warn("updating the node groups that use a catalog entry failed; retrying in the background",
				"kind", ref.Kind.String(), "name", ref.Name, "err", err)
			a.wakeConverger()
		}
		return revs, nil
	})
}

// DeleteCatalogEntry deletes an API-managed catalog entry that nothing
// references: no group uses a template or hook by name, and no template or
// group uses an account.
func (a *App) DeleteCatalogEntry(ctx context.Context, ref domain.CatalogRef, expectedRevision uint64) (Revisions, error) {
	return a.op(ctx, "DeleteCatalogEntry", func() (Revisions, error) {
		var revs Revisions
		cs := a.catalogStore()
		if cs == nil {
			return revs, domain.Errorf(contract.CodeFailedPrecondition, "this lifecycle store has no catalog")
		}
		cur := a.cat.entries[ref]
		switch {
		case cur == nil:
			return revs, domain.Errorf(contract.CodeNotFound, "%s not found", ref)
		case cur.e.Source == domain.SourceConfig:
			return revs, domain.Errorf(contract.CodeFailedPrecondition, "%s is defined in the configuration file; remove it there", ref)
		case expectedRevision != 0 && expectedRevision != cur.rev:
			return revs, domain.Errorf(contract.CodeAborted, "%s changed: revision %d, expected %d", ref, cur.rev, expectedRevision)
		}
		if err := a.inUseLocked(ref); err != nil {
			return revs, err
		}
		rev, err := a.deleteCatalogLocked(ctx, cs, cur)
		if err != nil {
			return revs, err
		}
		revs.Catalog = rev
		a.log.Info("catalog entry deleted", "kind", ref.Kind.String(), "name", ref.Name)
		return revs, nil
	})
}

// inUseLocked returns a FailedPrecondition naming what references ref.
func (a *App) inUseLocked(ref domain.CatalogRef) error {
	groups, templates := a.usersLocked(ref)
	var uses []string
	if len(templates) > 0 {
		uses = append(uses, "instance templates "+strings.Join(templates, ", "))
	}
	if len(groups) > 0 {
		uses = append(uses, "node groups "+strings.Join(groups, ", "))
	}
	if len(uses) == 0 {
		return nil
	}
	return domain.Errorf(contract.CodeFailedPrecondition, "%s is used by %s", ref, strings.Join(uses, " and "))
}

// usersLocked lists, sorted, the groups and catalog templates that
// reference ref by name.
func (a *App) usersLocked(ref domain.CatalogRef) (groups, templates []string) {
	for _, id := range a.sortedGroupIDsLocked() {
		g := a.groups[id].g
		switch ref.Kind {
		case domain.KindTemplate:
			if g.Template.Name == ref.Name {
				groups = append(groups, id)
			}
		case domain.KindAccount:
			if g.Template.Account == ref.Name {
				groups = append(groups, id)
			}
		case domain.KindHook:
			if hookNamed(g.Hooks.AfterCreated, ref.Name) || hookNamed(g.Hooks.BeforeDelete, ref.Name) {
				groups = append(groups, id)
			}
		}
	}
	if ref.Kind == domain.KindAccount {
		for r, rec := range a.cat.entries {
			if r.Kind == domain.KindTemplate && rec.e.Template.Account == ref.Name {
				templates = append(templates, r.Name)
			}
		}
		slices.Sort(templates)
	}
	return groups, templates
}

func hookNamed(h *domain.HookSpec, name string) bool { return h != nil && h.Name == name }

// completeEntryLocked fills a template's defaults from its account and
// checks the account exists.
func (a *App) completeEntryLocked(e *domain.CatalogEntry) error {
	switch {
	case e.Account != nil && e.Account.Provider == "":
		e.Account.Provider = DefaultProvider
	case e.Template != nil && e.Template.Account != "":
		acct := a.cat.entries[domain.CatalogRef{Kind: domain.KindAccount, Name: e.Template.Account}]
		if acct == nil {
			return domain.Errorf(contract.CodeFailedPrecondition, "instance template %q references cloud account %q, which is not in the catalog",
				e.Template.Name, e.Template.Account)
		}
		t := e.Template
		if t.Provider == "" {
			t.Provider = acct.e.Account.Provider
		} else if acct.e.Account.Provider != "" && t.Provider != acct.e.Account.Provider {
			return domain.Errorf(contract.CodeInvalidArgument, "instance template %q: provider %q differs from the provider %q of account %q",
				t.Name, t.Provider, acct.e.Account.Provider, t.Account)
		}
		if t.Region == "" && len(acct.e.Account.Regions) > 0 {
			t.Region = acct.e.Account.Regions[0]
		}
	}
	return nil
}

func (a *App) writeCatalogLocked(ctx context.Context, cur *catalogRec, e domain.CatalogEntry) (uint64, error) {
	cs := a.catalogStore()
	e.UpdatedAt = a.clock.Now()
	var rev uint64
	var err error
	if cur == nil {
		rev, err = cs.CreateCatalogEntry(ctx, e)
	} else {
		rev, err = cs.UpdateCatalogEntry(ctx, e, cur.rev)
	}
	if err != nil {
		if errors.Is(err, ports.ErrConflict) {
			a.refreshCatalogLocked(ctx, e.Ref())
		}
		return 0, fmt.Errorf("writing %s: %w", e.Ref(), err)
	}
	a.cat.entries[e.Ref()] = &catalogRec{e: e, rev: rev}
	return rev, nil
}

func (a *App) deleteCatalogLocked(ctx context.Context, cs ports.CatalogStore, cur *catalogRec) (uint64, error) {
	ref := cur.e.Ref()
	rev, err := cs.DeleteCatalogEntry(ctx, ref, cur.rev)
	if err != nil {
		if errors.Is(err, ports.ErrConflict) {
			a.refreshCatalogLocked(ctx, ref)
		}
		return 0, fmt.Errorf("deleting %s: %w", ref, err)
	}
	delete(a.cat.entries, ref)
	return rev, nil
}

func (a *App) refreshCatalogLocked(ctx context.Context, ref domain.CatalogRef) {
	v, err := a.catalogStore().GetCatalogEntry(ctx, ref)
	switch {
	case errors.Is(err, ports.ErrNotFound):
		delete(a.cat.entries, ref)
	case err != nil:
		a.log.Warn("refreshing a catalog entry after a conflict", "kind", ref.Kind.String(), "name", ref.Name, "err", err)
	default:
		a.cat.entries[ref] = &catalogRec{e: v.Entry, rev: v.Revision}
	}
}

// resolveGroupLocked gives an API group the catalog's versions of the
// template and hooks it names. A template or hook given by name only
// (nothing else set) must be in the catalog.
func (a *App) resolveGroupLocked(g *domain.NodeGroup) error {
	t := g.Template
	if t.Name != "" && t.Provider == "" && t.Account == "" && t.Region == "" && t.ParametersJSON == "" &&
		a.cat.entries[domain.CatalogRef{Kind: domain.KindTemplate, Name: t.Name}] == nil {
		return domain.Errorf(contract.CodeInvalidArgument, "node group %q: unknown instance template %q", g.ID, t.Name)
	}
	for _, h := range []*domain.HookSpec{g.Hooks.AfterCreated, g.Hooks.BeforeDelete} {
		if h != nil && h.Name != "" && h.Script == "" && a.cat.entries[domain.CatalogRef{Kind: domain.KindHook, Name: h.Name}] == nil {
			return domain.Errorf(contract.CodeInvalidArgument, "node group %q: unknown hook %q", g.ID, h.Name)
		}
	}
	*g = a.snapshotLocked(*g)
	return nil
}

// snapshotLocked returns g with the catalog's current versions of the
// template and hooks it names (those not in the catalog are kept as they
// are: inline definitions).
func (a *App) snapshotLocked(g domain.NodeGroup) domain.NodeGroup {
	if g.Template.Name != "" {
		if r := a.cat.entries[domain.CatalogRef{Kind: domain.KindTemplate, Name: g.Template.Name}]; r != nil {
			g.Template = *cloneEntry(r.e).Template
		}
	}
	for _, h := range []**domain.HookSpec{&g.Hooks.AfterCreated, &g.Hooks.BeforeDelete} {
		if *h == nil || (*h).Name == "" {
			continue
		}
		if r := a.cat.entries[domain.CatalogRef{Kind: domain.KindHook, Name: (*h).Name}]; r != nil {
			*h = cloneEntry(r.e).Hook
		}
	}
	return g
}

// convergeLocked re-snapshots every API group whose snapshots differ from
// the catalog. Group ids whose write failed are reported in the error.
func (a *App) convergeLocked(ctx context.Context, revs *Revisions) error {
	var errs []error
	if err := a.resealLocked(ctx, revs); err != nil {
		errs = append(errs, err)
	}
	if len(a.cat.entries) == 0 {
		return errors.Join(errs...)
	}
	for _, id := range a.sortedGroupIDsLocked() {
		if err := a.resnapshotLocked(ctx, id, revs); err != nil {
			errs = append(errs, fmt.Errorf("group %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

func (a *App) resnapshotLocked(ctx context.Context, id string, revs *Revisions) error {
	for range a.opts.CASRetries {
		rec, ok := a.groups[id]
		if !ok || rec.g.Source == domain.SourceConfig {
			return nil // gone, or owned by the file
		}
		next := a.snapshotLocked(rec.g)
		if sameDefinition(next, rec.g) {
			return nil
		}
		rev, err := a.writeGroupLocked(ctx, rec, next)
		if errors.Is(err, ports.ErrConflict) {
			continue
		}
		if err != nil {
			return err
		}
		revs.group(rev)
		a.log.Info("node group now uses the catalog's current template and hooks", "group", id, "template", next.Template.Name)
		return nil
	}
	return fmt.Errorf("concurrent writes kept conflicting: %w", ports.ErrConflict)
}

func (a *App) wakeConverger() {
	select {
	case a.catalogWake() <- struct{}{}:
	default:
	}
}

// ConvergeCatalog re-snapshots the API groups whose template or hooks
// differ from the catalog's current versions.
func (a *App) ConvergeCatalog(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.loaded {
		return ErrNotLeader
	}
	var revs Revisions
	err := a.convergeLocked(ctx, &revs)
	if revs.Groups != 0 {
		a.Wake()
	}
	return err
}

// RunCatalogConverger converges the groups' snapshots when it starts
// (with leadership), every catalogConvergeInterval, and soon after an
// operation could not update every group, until ctx ends.
func (a *App) RunCatalogConverger(ctx context.Context) error {
	t := time.NewTicker(catalogConvergeInterval)
	defer t.Stop()
	for {
		// First pass at once: a previous leader may have stopped midway.
		if err := a.ConvergeCatalog(ctx); err != nil && !errors.Is(err, ErrNotLeader) {
			a.log.Warn("updating node groups to the catalog's current versions failed; retrying", "err", err)
			a.wakeConverger()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-a.catalogWake():
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
func (a *App) applyFileCatalogLocked(ctx context.Context) []error {
	if !a.cat.configSet || a.catalogStore() == nil {
		return nil
	}
	var errs []error
	for _, fe := range a.cat.config {
		if err := a.applyFileEntryLocked(ctx, fe); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", fe.Ref(), err))
		}
	}
	return errs
}

func (a *App) applyFileEntryLocked(ctx context.Context, fe domain.CatalogEntry) error {
	fe = cloneEntry(fe)
	fe.Source = domain.SourceConfig
	ref := fe.Ref()
	for range a.opts.CASRetries {
		cur := a.cat.entries[ref]
		if cur != nil && cur.e.Source != domain.SourceConfig {
			a.log.Warn("the configuration file defines a catalog entry that was created through the API; the file's definition is ignored",
				"kind", ref.Kind.String(), "name", ref.Name)
			return nil
		}
		var prev *domain.CatalogEntry
		if cur != nil {
			prev = &cur.e
		}
		if _, err := a.sealEntryLocked(&fe, prev); err != nil {
			return err
		}
		if cur != nil && sameEntry(cur.e, fe) {
			return nil
		}
		_, err := a.writeCatalogLocked(ctx, cur, fe)
		if errors.Is(err, ports.ErrConflict) {
			continue
		}
		if err != nil {
			return err
		}
		a.log.Info("catalog entry written from the configuration file", "kind", ref.Kind.String(), "name", ref.Name, "created", cur == nil)
		return nil
	}
	return fmt.Errorf("concurrent writes kept conflicting: %w", ports.ErrConflict)
}

// pruneFileCatalogLocked deletes file entries that left the file once
// nothing references them (templates first, so an account whose templates
// left too can go in the same pass).
func (a *App) pruneFileCatalogLocked(ctx context.Context) []error {
	cs := a.catalogStore()
	if !a.cat.configSet || cs == nil {
		return nil
	}
	inFile := map[domain.CatalogRef]bool{}
	for _, fe := range a.cat.config {
		inFile[fe.Ref()] = true
	}
	var errs []error
	for _, kind := range []domain.CatalogKind{domain.KindTemplate, domain.KindHook, domain.KindAccount} {
		var refs []domain.CatalogRef
		for ref, rec := range a.cat.entries {
			if ref.Kind == kind && rec.e.Source == domain.SourceConfig && !inFile[ref] {
				refs = append(refs, ref)
			}
		}
		slices.SortFunc(refs, func(x, y domain.CatalogRef) int { return strings.Compare(x.Name, y.Name) })
		for _, ref := range refs {
			if err := a.inUseLocked(ref); err != nil {
				a.log.Warn("catalog entry removed from the configuration file is still in use; it is kept until nothing uses it",
					"kind", ref.Kind.String(), "name", ref.Name, "why", err.Error())
				continue
			}
			if _, err := a.deleteCatalogLocked(ctx, cs, a.cat.entries[ref]); err != nil {
				errs = append(errs, err)
				continue
			}
			a.log.Info("catalog entry removed from the configuration file deleted", "kind", ref.Kind.String(), "name", ref.Name)
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
