package app

import (
	"cmp"
	"container/heap"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// The catalog views below are derived from the node groups: lifecycle
// resolves the configuration's instance templates, accounts and hooks into
// a snapshot inside every group record, and those snapshots are all the
// gateway sees. A template, account or hook no group references is
// therefore not listed.

// TemplateView is a named instance template as the groups hold it.
type TemplateView struct {
	Name string
	// Template is the snapshot of the most recently updated group using
	// it. Shared: callers must not modify it.
	Template *statev1.InstanceTemplate
	// Groups are the ids of the groups using the template, sorted.
	Groups []string
	// Divergent reports that the groups hold different snapshots under
	// this name (a configuration change not yet applied to every group, or
	// groups written through the API with the same name).
	Divergent bool
}

// AccountView is a cloud account as the groups' templates reference it.
// Credentials are never part of it: they stay with the cloud adapter.
type AccountView struct {
	Name     string
	Provider string
	// Regions, Templates and Groups are sorted and distinct.
	Regions   []string
	Templates []string
	Groups    []string
}

// HookView is a named hook of one phase as the groups hold it.
type HookView struct {
	Name string
	// Phase is "afterCreated" or "beforeDelete".
	Phase string
	// Spec is the snapshot of the most recently updated group using it.
	// Shared: callers must not modify it (and must never expose its
	// script or environment).
	Spec      *statev1.HookSpec
	Groups    []string
	Divergent bool
}

// Hook phases as the API names them.
const (
	PhaseAfterCreated = "afterCreated"
	PhaseBeforeDelete = "beforeDelete"
)

// groupsNewestFirst returns the groups, most recently updated first (then
// by id), so a catalog entry shows the latest snapshot.
func (s *Service) groupsNewestFirst() ([]GroupView, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	groups := s.rm.Groups()
	slices.SortStableFunc(groups, func(a, b GroupView) int {
		return b.Record.GetUpdatedAt().AsTime().Compare(a.Record.GetUpdatedAt().AsTime())
	})
	return groups, nil
}

// Templates lists the named instance templates the groups use, by name.
// Templates given inline without a name appear only in their group.
func (s *Service) Templates() ([]TemplateView, error) {
	groups, err := s.groupsNewestFirst()
	if err != nil {
		return nil, err
	}
	byName := map[string]*TemplateView{}
	for _, g := range groups {
		t := g.Record.GetInstanceTemplate()
		if t.GetName() == "" {
			continue
		}
		v := byName[t.GetName()]
		if v == nil {
			v = &TemplateView{Name: t.GetName(), Template: t}
			byName[t.GetName()] = v
		} else if !proto.Equal(v.Template, t) {
			v.Divergent = true
		}
		v.Groups = append(v.Groups, g.Record.GetId())
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
	return TemplateView{}, domain.Errorf(domain.CodeNotFound, "no node group uses an instance template named %q", name)
}

// Accounts lists the cloud accounts the groups' templates reference.
func (s *Service) Accounts() ([]AccountView, error) {
	groups, err := s.groupsNewestFirst()
	if err != nil {
		return nil, err
	}
	byName := map[string]*AccountView{}
	for _, g := range groups {
		t := g.Record.GetInstanceTemplate()
		if t.GetAccount() == "" {
			continue
		}
		v := byName[t.GetAccount()]
		if v == nil {
			v = &AccountView{Name: t.GetAccount(), Provider: t.GetProvider()}
			byName[t.GetAccount()] = v
		}
		v.Regions = appendNonEmpty(v.Regions, t.GetRegion())
		v.Templates = appendNonEmpty(v.Templates, t.GetName())
		v.Groups = append(v.Groups, g.Record.GetId())
	}
	out := make([]AccountView, 0, len(byName))
	for _, v := range byName {
		v.Regions, v.Templates, v.Groups = sortedSet(v.Regions), sortedSet(v.Templates), sortedSet(v.Groups)
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
	return AccountView{}, domain.Errorf(domain.CodeNotFound, "no node group uses a cloud account named %q", name)
}

// Hooks lists the named hooks the groups use, by phase and name.
func (s *Service) Hooks() ([]HookView, error) {
	groups, err := s.groupsNewestFirst()
	if err != nil {
		return nil, err
	}
	type key struct{ phase, name string }
	byKey := map[key]*HookView{}
	for _, g := range groups {
		for _, h := range []struct {
			phase string
			spec  *statev1.HookSpec
		}{{PhaseAfterCreated, g.Record.GetHooks().GetAfterCreated()}, {PhaseBeforeDelete, g.Record.GetHooks().GetBeforeDelete()}} {
			if h.spec.GetName() == "" {
				continue
			}
			k := key{h.phase, h.spec.GetName()}
			v := byKey[k]
			if v == nil {
				v = &HookView{Name: k.name, Phase: k.phase, Spec: h.spec}
				byKey[k] = v
			} else if !proto.Equal(v.Spec, h.spec) {
				v.Divergent = true
			}
			v.Groups = append(v.Groups, g.Record.GetId())
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
	// Transition is shared: callers must not modify it.
	Transition *statev1.Transition
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
		return nil, domain.Errorf(domain.CodeInvalidArgument, "limit must be between 1 and %d, got %d", MaxTransitions, limit)
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
		for _, t := range v.Record.GetHistory() {
			tv := TransitionView{Instance: v.Record.GetId(), Group: v.Group(), Transition: t}
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
	if c := a.Transition.GetAt().AsTime().Compare(b.Transition.GetAt().AsTime()); c != 0 {
		return c > 0
	}
	if c := strings.Compare(a.Instance, b.Instance); c != 0 {
		return c > 0
	}
	return a.Transition.GetTo() > b.Transition.GetTo()
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
