package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

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

// catalog is the catalog component: the named templates, accounts and
// hooks (cached in cat, stored in the declared catalog store), their
// writes, and the convergence of the groups that use them (converge.go).
type catalog struct {
	*cache
	*seals
	req *requests
	cs  ports.CatalogStore
	cat catalogState
	// sealedState is what the last re-seal pass logged (sealing.go).
	sealedState string
}

func newCatalog(c *cache, r *requests, cs ports.CatalogStore, sealer Sealer) *catalog {
	return &catalog{cache: c, seals: &seals{sealer: sealer}, req: r, cs: cs}
}

func (ct *catalog) listCatalog(ctx context.Context) ([]ports.VersionedCatalogEntry, error) {
	cs := ct.cs
	if cs == nil {
		return nil, nil
	}
	return cs.ListCatalog(ctx)
}

func (ct *catalog) setCatalogLocked(vs []ports.VersionedCatalogEntry) {
	ct.cat.entries = make(map[domain.CatalogRef]*catalogRec, len(vs))
	for _, v := range vs {
		ct.cat.entries[v.Entry.Ref()] = &catalogRec{e: v.Entry, rev: v.Revision}
	}
}

func (ct *catalog) catalogWake() chan struct{} {
	ct.cat.wakeOnce.Do(func() { ct.cat.wake = make(chan struct{}, 1) })
	return ct.cat.wake
}

// CatalogEntry returns the cached catalog entry ref and its revision.
func (ct *catalog) CatalogEntry(ref domain.CatalogRef) (domain.CatalogEntry, uint64, bool) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	r, ok := ct.cat.entries[ref]
	if !ok {
		return domain.CatalogEntry{}, 0, false
	}
	return r.e, r.rev, true
}

// SetConfigCatalog records the accounts and templates of the latest valid
// configuration file. They are applied with the groups, by the next
// SetConfig (or Start): call it first.
func (ct *catalog) SetConfigCatalog(entries []domain.CatalogEntry) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	ct.cat.config = slices.Clone(entries)
	ct.cat.configSet = true
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
func (ct *catalog) PutCatalogEntry(ctx context.Context, req PutCatalogRequest) (Revisions, error) {
	return ct.req.op(ctx, "PutCatalogEntry", func() (Revisions, error) {
		var revs Revisions
		if ct.cs == nil {
			return revs, domain.Errorf(contract.CodeFailedPrecondition, "lifecycle has no catalog store")
		}
		e := cloneEntry(req.Entry)
		e.Source = domain.SourceAPI
		if err := ct.completeEntryLocked(&e); err != nil {
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
		cur := ct.cat.entries[ref]
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
		rev, err := ct.writeCatalogLocked(ctx, cur, e)
		if err != nil {
			return revs, err
		}
		revs.Catalog = rev
		ct.log.Info("catalog entry stored", "kind", ref.Kind.String(), "name", ref.Name, "created", cur == nil, "revision", rev)
		if err := ct.convergeLocked(ctx, &revs); err != nil {
			// The entry is stored; the groups catch up in the background.
			ct.log.Warn("updating the node groups that use a catalog entry failed; retrying in the background",
				"kind", ref.Kind.String(), "name", ref.Name, "err", err)
			ct.wakeConverger()
		}
		return revs, nil
	})
}

// DeleteCatalogEntry deletes an API-managed catalog entry that nothing
// references: no group uses a template or hook by name, and no template or
// group uses an account.
func (ct *catalog) DeleteCatalogEntry(ctx context.Context, ref domain.CatalogRef, expectedRevision uint64) (Revisions, error) {
	return ct.req.op(ctx, "DeleteCatalogEntry", func() (Revisions, error) {
		var revs Revisions
		cs := ct.cs
		if cs == nil {
			return revs, domain.Errorf(contract.CodeFailedPrecondition, "lifecycle has no catalog store")
		}
		cur := ct.cat.entries[ref]
		switch {
		case cur == nil:
			return revs, domain.Errorf(contract.CodeNotFound, "%s not found", ref)
		case cur.e.Source == domain.SourceConfig:
			return revs, domain.Errorf(contract.CodeFailedPrecondition, "%s is defined in the configuration file; remove it there", ref)
		case expectedRevision != 0 && expectedRevision != cur.rev:
			return revs, domain.Errorf(contract.CodeAborted, "%s changed: revision %d, expected %d", ref, cur.rev, expectedRevision)
		}
		if err := ct.inUseLocked(ref); err != nil {
			return revs, err
		}
		rev, err := ct.deleteCatalogLocked(ctx, cs, cur)
		if err != nil {
			return revs, err
		}
		revs.Catalog = rev
		ct.log.Info("catalog entry deleted", "kind", ref.Kind.String(), "name", ref.Name)
		return revs, nil
	})
}

// inUseLocked returns a FailedPrecondition naming what references ref.
func (ct *catalog) inUseLocked(ref domain.CatalogRef) error {
	groups, templates := ct.usersLocked(ref)
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
func (ct *catalog) usersLocked(ref domain.CatalogRef) (groups, templates []string) {
	for _, id := range ct.sortedGroupIDsLocked() {
		g := ct.groups[id].g
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
		for r, rec := range ct.cat.entries {
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
func (ct *catalog) completeEntryLocked(e *domain.CatalogEntry) error {
	switch {
	case e.Account != nil && e.Account.Provider == "":
		e.Account.Provider = DefaultProvider
	case e.Template != nil && e.Template.Account != "":
		acct := ct.cat.entries[domain.CatalogRef{Kind: domain.KindAccount, Name: e.Template.Account}]
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

func (ct *catalog) writeCatalogLocked(ctx context.Context, cur *catalogRec, e domain.CatalogEntry) (uint64, error) {
	cs := ct.cs
	e.UpdatedAt = ct.clock.Now()
	var rev uint64
	var err error
	if cur == nil {
		rev, err = cs.CreateCatalogEntry(ctx, e)
	} else {
		rev, err = cs.UpdateCatalogEntry(ctx, e, cur.rev)
	}
	if err != nil {
		if errors.Is(err, ports.ErrConflict) {
			ct.refreshCatalogLocked(ctx, e.Ref())
		}
		return 0, fmt.Errorf("writing %s: %w", e.Ref(), err)
	}
	ct.cat.entries[e.Ref()] = &catalogRec{e: e, rev: rev}
	return rev, nil
}

func (ct *catalog) deleteCatalogLocked(ctx context.Context, cs ports.CatalogStore, cur *catalogRec) (uint64, error) {
	ref := cur.e.Ref()
	rev, err := cs.DeleteCatalogEntry(ctx, ref, cur.rev)
	if err != nil {
		if errors.Is(err, ports.ErrConflict) {
			ct.refreshCatalogLocked(ctx, ref)
		}
		return 0, fmt.Errorf("deleting %s: %w", ref, err)
	}
	delete(ct.cat.entries, ref)
	return rev, nil
}

func (ct *catalog) refreshCatalogLocked(ctx context.Context, ref domain.CatalogRef) {
	v, err := ct.cs.GetCatalogEntry(ctx, ref)
	switch {
	case errors.Is(err, ports.ErrNotFound):
		delete(ct.cat.entries, ref)
	case err != nil:
		ct.log.Warn("refreshing a catalog entry after a conflict", "kind", ref.Kind.String(), "name", ref.Name, "err", err)
	default:
		ct.cat.entries[ref] = &catalogRec{e: v.Entry, rev: v.Revision}
	}
}
