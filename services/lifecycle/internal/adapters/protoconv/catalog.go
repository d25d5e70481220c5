package protoconv

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/nodesmith/nodesmith/libs/messaging"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// TemplateToProto maps an instance template to its record (the same
// mapping as inside a group record).
func TemplateToProto(t domain.InstanceTemplate) *statev1.InstanceTemplate {
	return GroupToProto(domain.NodeGroup{Template: t}).GetInstanceTemplate()
}

// TemplateFromProto maps an instance template record.
func TemplateFromProto(p *statev1.InstanceTemplate) domain.InstanceTemplate {
	return GroupFromProto(&statev1.NodeGroup{InstanceTemplate: p}).Template
}

// HookToProto maps a hook to its record.
func HookToProto(h domain.HookSpec) *statev1.HookSpec { return hookToProto(&h) }

// HookFromProto maps a hook record.
func HookFromProto(p *statev1.HookSpec) domain.HookSpec {
	if h := hookFromProto(p); h != nil {
		return *h
	}
	return domain.HookSpec{}
}

// CatalogToProto maps a catalog entry to its record.
func CatalogToProto(e domain.CatalogEntry) *statev1.CatalogEntry {
	p := &statev1.CatalogEntry{Source: string(e.Source), UpdatedAt: ts(e.UpdatedAt)}
	switch {
	case e.Template != nil:
		p.Entry = &statev1.CatalogEntry_Template{Template: TemplateToProto(*e.Template)}
	case e.Account != nil:
		p.Entry = &statev1.CatalogEntry_Account{Account: &statev1.CloudAccount{
			Name: e.Account.Name, Provider: e.Account.Provider, Regions: slices.Clone(e.Account.Regions),
			SealedCredentials: bytes.Clone(e.Account.SealedCredentials), KeyId: e.Account.KeyID,
		}}
	case e.Hook != nil:
		p.Entry = &statev1.CatalogEntry_Hook{Hook: hookToProto(e.Hook)}
	}
	return p
}

// CatalogFromProto maps a catalog record.
func CatalogFromProto(p *statev1.CatalogEntry) domain.CatalogEntry {
	e := domain.CatalogEntry{Source: domain.Source(p.GetSource()), UpdatedAt: fromTS(p.GetUpdatedAt())}
	switch x := p.GetEntry().(type) {
	case *statev1.CatalogEntry_Template:
		t := TemplateFromProto(x.Template)
		e.Template = &t
	case *statev1.CatalogEntry_Account:
		a := x.Account
		e.Account = &domain.Account{Name: a.GetName(), Provider: a.GetProvider(), KeyID: a.GetKeyId()}
		if len(a.GetRegions()) > 0 {
			e.Account.Regions = slices.Clone(a.GetRegions())
		}
		if len(a.GetSealedCredentials()) > 0 {
			e.Account.SealedCredentials = bytes.Clone(a.GetSealedCredentials())
		}
	case *statev1.CatalogEntry_Hook:
		h := HookFromProto(x.Hook)
		e.Hook = &h
	}
	return e
}

// CatalogKey is the KV key of a catalog entry ("<kind>.<name>"), or ""
// for an unknown kind.
func CatalogKey(ref domain.CatalogRef) string {
	switch ref.Kind {
	case domain.KindTemplate:
		return messaging.CatalogKey(messaging.CatalogKeyTemplate, ref.Name)
	case domain.KindAccount:
		return messaging.CatalogKey(messaging.CatalogKeyAccount, ref.Name)
	case domain.KindHook:
		return messaging.CatalogKey(messaging.CatalogKeyHook, ref.Name)
	}
	return ""
}

// CheckedCatalogKey is CatalogKey for a store: an unknown kind is an error.
func CheckedCatalogKey(ref domain.CatalogRef) (string, error) {
	k := CatalogKey(ref)
	if k == "" {
		return "", fmt.Errorf("catalog entry %q has no kind", ref.Name)
	}
	return k, nil
}
