package app

import (
	"cmp"
	"container/heap"
	"context"
	"log/slog"
	"slices"
	"strings"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/ports"
)

// The catalog views come from the catalog bucket (lifecycle writes the
// configuration file's accounts and templates there, and whatever
// operators create through the admin API); which groups use an entry is
// derived from the groups, which reference templates and hooks by name
// and hold a snapshot of them. Named templates and hooks that only exist
// inline in groups (written through the API before the catalog existed)
// are listed too, without a source or revision.

// Catalog kinds, as the API names them; they are also the key prefixes of
// the catalog bucket (libs/messaging.CatalogKey*).
const (
	KindTemplates = "templates"
	KindAccounts  = "accounts"
	KindHooks     = "hooks"
)

// CatalogKey is the catalog bucket key of an entry.
func CatalogKey(kind, name string) string { return kind + "." + name }

// TemplateView is a named instance template.
type TemplateView struct {
	Name string
	// Template is the catalog's definition, or for an inline template the
	// snapshot of the most recently updated group using it. Shared:
	// callers must not modify it.
	Template *domain.InstanceTemplate
	// Groups are the ids of the groups using the template, sorted.
	Groups []string
	// Divergent reports that some group holds another version under this
	// name (a change not yet applied to every group, or a group defined
	// in the configuration file with its own template of that name).
	Divergent bool
	// Source is "config" or "api" for catalog entries, "" for inline ones.
	Source   string
	Revision uint64
}

// AccountView is a cloud account. Credentials are never part of it.
type AccountView struct {
	Name     string
	Provider string
	// Regions, Templates and Groups are sorted and distinct; Regions of a
	// catalog account keep the account's order (the first is the default).
	Regions   []string
	Templates []string
	Groups    []string
	// HasSealedCredentials: the catalog holds credentials for the account
	// (sealed under key KeyID); otherwise the cloud adapter's files or
	// environment must.
	HasSealedCredentials bool
	KeyID                string
	Source               string
	Revision             uint64
}

// HookView is a named hook.
type HookView struct {
	Name string
	// Phase is "afterCreated" or "beforeDelete" for inline hooks, "" for
	// catalog hooks (usable in either phase).
	Phase string
	// Spec is the catalog's definition or the newest group snapshot.
	// Shared: callers must not modify it (and must never expose its
	// script or environment).
	Spec      *domain.HookSpec
	Groups    []string
	Divergent bool
	Source    string
	Revision  uint64
}

// Hook phases as the API names them.
const (
	PhaseAfterCreated = "afterCreated"
	PhaseBeforeDelete = "beforeDelete"
)

func (s *Service) catalogReady() error {
	if err := s.ready(); err != nil {
		return err
	}
	if !s.rm.CatalogSynced() {
		return domain.Errorf(contract.CodeUnavailable, "the gateway is still loading the catalog from NATS")
	}
	return nil
}

// groupsNewestFirst returns the groups, most recently updated first (then
// by id), so an inline entry shows the latest snapshot.
func (s *Service) groupsNewestFirst() ([]GroupView, error) {
	if err := s.catalogReady(); err != nil {
		return nil, err
	}
	groups := s.rm.Groups()
	slices.SortStableFunc(groups, func(a, b GroupView) int {
		return b.Record.UpdatedAt.Compare(a.Record.UpdatedAt)
	})
	return groups, nil
}

// Templates lists the catalog's instance templates and the named inline
// templates of groups, by name.
func (s *Service) Templates() ([]TemplateView, error) {
	groups, err := s.groupsNewestFirst()
	if err != nil {
		return nil, err
	}
	byName := map[string]*TemplateView{}
	for _, c := range s.rm.Catalog(KindTemplates + ".") {
		t := c.Entry.Template
		if t == nil {
			continue
		}
		byName[t.Name] = &TemplateView{Name: t.Name, Template: t, Source: c.Entry.Source, Revision: c.Revision}
	}
	for _, g := range groups {
		t := g.Record.InstanceTemplate
		if t == nil || t.Name == "" {
			continue
		}
		v := byName[t.Name]
		if v == nil {
			v = &TemplateView{Name: t.Name, Template: t}
			byName[t.Name] = v
		} else if !v.Template.Equal(t) {
			v.Divergent = true
		}
		v.Groups = append(v.Groups, g.Record.ID)
	}
	out := make([]TemplateView, 0, len(byName))
	for _, v := range byName {
		slices.Sort(v.Groups)
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b TemplateView) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Template returns the named template.
func (s *Service) Template(name string) (TemplateView, error) {
	all, err := s.Templates()
	if err != nil {
		return TemplateView{}, err
	}
	for _, v := range all {
		if v.Name == name {
			return v, nil
		}
	}
	return TemplateView{}, domain.Errorf(contract.CodeNotFound, "instance template %q not found", name)
}

// Accounts lists the catalog's cloud accounts and those the groups'
// templates reference.
func (s *Service) Accounts() ([]AccountView, error) {
	groups, err := s.groupsNewestFirst()
	if err != nil {
		return nil, err
	}
	byName := map[string]*AccountView{}
	fixedRegions := map[string]bool{}
	for _, c := range s.rm.Catalog(KindAccounts + ".") {
		a := c.Entry.Account
		if a == nil {
			continue
		}
		byName[a.Name] = &AccountView{
			Name: a.Name, Provider: a.Provider, Regions: slices.Clone(a.Regions),
			HasSealedCredentials: len(a.SealedCredentials) > 0, KeyID: a.KeyID,
			Source: c.Entry.Source, Revision: c.Revision,
		}
		fixedRegions[a.Name] = true
	}
	for _, c := range s.rm.Catalog(KindTemplates + ".") {
		t := c.Entry.Template
		if t == nil {
			continue
		}
		if v := byName[t.Account]; v != nil {
			v.Templates = appendNonEmpty(v.Templates, t.Name)
		}
	}
	for _, g := range groups {
		t := g.Record.InstanceTemplate
		if t == nil || t.Account == "" {
			continue
		}
		v := byName[t.Account]
		if v == nil {
			v = &AccountView{Name: t.Account, Provider: t.Provider}
			byName[t.Account] = v
		}
		if !fixedRegions[v.Name] {
			v.Regions = appendNonEmpty(v.Regions, t.Region)
		}
		v.Templates = appendNonEmpty(v.Templates, t.Name)
		v.Groups = append(v.Groups, g.Record.ID)
	}
	out := make([]AccountView, 0, len(byName))
	for _, v := range byName {
		if !fixedRegions[v.Name] {
			v.Regions = sortedSet(v.Regions)
		}
		v.Templates, v.Groups = sortedSet(v.Templates), sortedSet(v.Groups)
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b AccountView) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Account returns the named account.
func (s *Service) Account(name string) (AccountView, error) {
	all, err := s.Accounts()
	if err != nil {
		return AccountView{}, err
	}
	for _, v := range all {
		if v.Name == name {
			return v, nil
		}
	}
	return AccountView{}, domain.Errorf(contract.CodeNotFound, "cloud account %q not found", name)
}

// Hooks lists the catalog's hooks (by name) and the named inline hooks of
// groups (by phase and name).
func (s *Service) Hooks() ([]HookView, error) {
	groups, err := s.groupsNewestFirst()
	if err != nil {
		return nil, err
	}
	type key struct{ phase, name string }
	byKey := map[key]*HookView{}
	for _, c := range s.rm.Catalog(KindHooks + ".") {
		h := c.Entry.Hook
		if h == nil {
			continue
		}
		byKey[key{"", h.Name}] = &HookView{Name: h.Name, Spec: h, Source: c.Entry.Source, Revision: c.Revision}
	}
	for _, g := range groups {
		for _, h := range []struct {
			phase string
			spec  *domain.HookSpec
		}{{PhaseAfterCreated, g.Record.Hook(true)}, {PhaseBeforeDelete, g.Record.Hook(false)}} {
			if h.spec == nil || h.spec.Name == "" {
				continue
			}
			if v := byKey[key{"", h.spec.Name}]; v != nil {
				if !slices.Contains(v.Groups, g.Record.ID) {
					v.Groups = append(v.Groups, g.Record.ID)
				}
				if !v.Spec.Equal(h.spec) {
					v.Divergent = true
				}
				continue
			}
			k := key{h.phase, h.spec.Name}
			v := byKey[k]
			if v == nil {
				v = &HookView{Name: k.name, Phase: k.phase, Spec: h.spec}
				byKey[k] = v
			} else if !v.Spec.Equal(h.spec) {
				v.Divergent = true
			}
			v.Groups = append(v.Groups, g.Record.ID)
		}
	}
	out := make([]HookView, 0, len(byKey))
	for _, v := range byKey {
		slices.Sort(v.Groups)
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b HookView) int {
		return cmp.Or(strings.Compare(a.Phase, b.Phase), strings.Compare(a.Name, b.Name))
	})
	return out, nil
}

// Hook returns the named hook of the catalog, else the first inline hook
// of that name.
func (s *Service) Hook(name string) (HookView, error) {
	all, err := s.Hooks()
	if err != nil {
		return HookView{}, err
	}
	for _, v := range all {
		if v.Name == name {
			return v, nil
		}
	}
	return HookView{}, domain.Errorf(contract.CodeNotFound, "hook %q not found", name)
}

// CatalogEntry returns the catalog entry of kind named name.
func (s *Service) CatalogEntry(kind, name string) (CatalogView, bool) {
	return s.rm.CatalogEntry(CatalogKey(kind, name))
}

var catalogKinds = map[string]bool{KindTemplates: true, KindAccounts: true, KindHooks: true}

func entryKindName(e *domain.CatalogEntry) (kind, name string) {
	switch {
	case e == nil:
	case e.Template != nil:
		return KindTemplates, e.Template.Name
	case e.Account != nil:
		return KindAccounts, e.Account.Name
	case e.Hook != nil:
		return KindHooks, e.Hook.Name
	}
	return "", ""
}

// PutCatalogEntry creates or replaces a catalog entry (operators), with
// the semantics of PutGroup: expectedRevision zero only creates unless
// upsert; otherwise the entry must still be at expectedRevision.
func (s *Service) PutCatalogEntry(ctx context.Context, e *domain.CatalogEntry, expectedRevision uint64, upsert bool) (view CatalogView, created bool, err error) {
	kind, name := entryKindName(e)
	if kind == "" {
		return CatalogView{}, false, domain.Errorf(contract.CodeInvalidArgument, "the entry holds no template, account or hook")
	}
	if err := s.catalogReady(); err != nil {
		return CatalogView{}, false, err
	}
	cur, exists := s.CatalogEntry(kind, name)
	what := strings.TrimSuffix(kind, "s") + " " + name
	switch {
	case expectedRevision != 0 && !exists:
		return CatalogView{}, false, domain.Errorf(contract.CodeNotFound, "%s not found", what)
	case expectedRevision != 0 && cur.Revision != expectedRevision:
		return CatalogView{}, false, domain.Errorf(contract.CodeAborted, "%s is at revision %d, not %d", what, cur.Revision, expectedRevision)
	case expectedRevision == 0 && exists && !upsert:
		return CatalogView{}, false, domain.Errorf(contract.CodeAlreadyExists, "%s already exists", what)
	}
	if _, err := s.do(ctx, ports.PutCatalogEntry{Entry: e, ExpectedRevision: expectedRevision, Upsert: upsert}, slog.String("kind", kind), slog.String("name", name), slog.Bool("create", !exists)); err != nil {
		return CatalogView{}, false, err
	}
	view, ok := s.CatalogEntry(kind, name)
	if !ok {
		return CatalogView{}, false, domain.Errorf(contract.CodeAborted, "%s was deleted concurrently", what)
	}
	return view, !exists, nil
}

// DeleteCatalogEntry deletes a catalog entry if it is still at
// expectedRevision (zero: the revision this gateway sees). Lifecycle
// refuses while groups (or, for an account, templates) use it.
func (s *Service) DeleteCatalogEntry(ctx context.Context, kind, name string, expectedRevision uint64) error {
	if !catalogKinds[kind] {
		return domain.Errorf(contract.CodeInvalidArgument, "unknown catalog kind %q", kind)
	}
	if err := s.catalogReady(); err != nil {
		return err
	}
	what := strings.TrimSuffix(kind, "s") + " " + name
	cur, exists := s.CatalogEntry(kind, name)
	if !exists {
		return domain.Errorf(contract.CodeNotFound, "%s not found", what)
	}
	if expectedRevision == 0 {
		expectedRevision = cur.Revision
	}
	if cur.Revision != expectedRevision {
		return domain.Errorf(contract.CodeAborted, "%s is at revision %d, not %d", what, cur.Revision, expectedRevision)
	}
	_, err := s.do(ctx, ports.DeleteCatalogEntry{Kind: kind, Name: name, ExpectedRevision: expectedRevision}, slog.String("kind", kind), slog.String("name", name))
	return err
}

func appendNonEmpty(list []string, s string) []string {
	if s == "" {
		return list
	}
	return append(list, s)
}

func sortedSet(list []string) []string {
	slices.Sort(list)
	return slices.Compact(list)
}

// TransitionView is one state transition of an instance.
type TransitionView struct {
	Instance, Group string
	Transition      domain.Transition
}

// MaxTransitions bounds one RecentTransitions answer.
const MaxTransitions = 1000

// RecentTransitions returns the newest limit (1..MaxTransitions) state
// transitions recorded in the instances' histories, newest first,
// optionally of one group. Histories are bounded per instance, so the
// oldest transitions of busy instances are not available.
func (s *Service) RecentTransitions(group string, limit int) ([]TransitionView, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	if limit < 1 || limit > MaxTransitions {
		return nil, domain.Errorf(contract.CodeInvalidArgument, "limit must be between 1 and %d, got %d", MaxTransitions, limit)
	}
	var views []InstanceView
	if group != "" {
		views = s.rm.GroupInstances(group, nil)
	} else {
		views = s.rm.Instances(nil)
	}
	// A min-heap of the newest limit transitions: one pass, bounded memory,
	// however many instances and history entries there are.
	h := &transitionHeap{}
	for _, v := range views {
		for _, t := range v.Record.History {
			tv := TransitionView{Instance: v.Record.ID, Group: v.Group(), Transition: t}
			switch {
			case h.Len() < limit:
				heap.Push(h, tv)
			case newer(tv, (*h)[0]):
				(*h)[0] = tv
				heap.Fix(h, 0)
			}
		}
	}
	out := make([]TransitionView, h.Len())
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(h).(TransitionView)
	}
	return out, nil
}

// newer orders transitions by time, then (for a stable answer) by
// instance id and target state.
func newer(a, b TransitionView) bool {
	if c := a.Transition.At().Compare(b.Transition.At()); c != 0 {
		return c > 0
	}
	if c := strings.Compare(a.Instance, b.Instance); c != 0 {
		return c > 0
	}
	return a.Transition.To > b.Transition.To
}

// transitionHeap is a min-heap by newer: the oldest kept transition on top.
type transitionHeap []TransitionView

func (h transitionHeap) Len() int           { return len(h) }
func (h transitionHeap) Less(i, j int) bool { return newer(h[j], h[i]) }
func (h transitionHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *transitionHeap) Push(x any)        { *h = append(*h, x.(TransitionView)) }
func (h *transitionHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
