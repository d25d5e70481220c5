package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// SampleCatalog returns one entry of each kind, every field set.
func SampleCatalog() []domain.CatalogEntry {
	g := SampleGroup("x")
	acct := domain.Account{Name: "team", Provider: cloudspec.Tencent, Regions: []string{"ap-guangzhou", "ap-shanghai"},
		SealedCredentials: []byte{1, 2, 3}, KeyID: "abcd1234"}
	tmpl := g.Template
	hook := *g.Hooks.AfterCreated
	at := t0.Add(time.Minute)
	return []domain.CatalogEntry{
		{Account: &acct, Source: domain.SourceAPI, UpdatedAt: at},
		{Template: &tmpl, Source: domain.SourceConfig, UpdatedAt: at},
		{Hook: &hook, Source: domain.SourceAPI, UpdatedAt: at},
	}
}

// RunCatalog runs the catalog contract against stores made by newStore.
func RunCatalog(t *testing.T, newStore func(t *testing.T) ports.CatalogStore) {
	t.Run("catalog round trip keeps every field of every kind", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		for _, e := range SampleCatalog() {
			rev, err := s.CreateCatalogEntry(ctx, e)
			if err != nil || rev == 0 {
				t.Fatalf("CreateCatalogEntry(%s) = %d, %v", e.Ref(), rev, err)
			}
			got, err := s.GetCatalogEntry(ctx, e.Ref())
			if err != nil || got.Revision != rev || !reflect.DeepEqual(got.Entry, e) {
				t.Errorf("round trip of %s: rev %d (want %d), %v\n got %+v\nwant %+v", e.Ref(), got.Revision, rev, err, got.Entry, e)
			}
		}
		all, err := s.ListCatalog(ctx)
		if err != nil || len(all) != 3 {
			t.Fatalf("ListCatalog = %d entries, %v", len(all), err)
		}
	})

	t.Run("kinds are separate namespaces", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		acct := domain.Account{Name: "same", Provider: "p"}
		hook := domain.HookSpec{Name: "same", Script: "s"}
		if _, err := s.CreateCatalogEntry(ctx, domain.CatalogEntry{Account: &acct}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateCatalogEntry(ctx, domain.CatalogEntry{Hook: &hook}); err != nil {
			t.Fatalf("a hook named like an account: %v", err)
		}
		if _, err := s.GetCatalogEntry(ctx, domain.CatalogRef{Kind: domain.KindTemplate, Name: "same"}); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("template lookup err = %v, want ErrNotFound", err)
		}
	})

	t.Run("catalog writes are compare-and-set", func(t *testing.T) {
		s, ctx := newStore(t), context.Background()
		e := SampleCatalog()[2]
		r1, err := s.CreateCatalogEntry(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateCatalogEntry(ctx, e); !errors.Is(err, ports.ErrConflict) {
			t.Errorf("second create err = %v, want ErrConflict", err)
		}
		e.Hook.Script = "v2"
		r2, err := s.UpdateCatalogEntry(ctx, e, r1)
		if err != nil || r2 <= r1 {
			t.Fatalf("update = %d, %v", r2, err)
		}
		if _, err := s.UpdateCatalogEntry(ctx, e, r1); !errors.Is(err, ports.ErrConflict) {
			t.Errorf("stale update err = %v, want ErrConflict", err)
		}
		if _, err := s.DeleteCatalogEntry(ctx, e.Ref(), r1); !errors.Is(err, ports.ErrConflict) {
			t.Errorf("stale delete err = %v, want ErrConflict", err)
		}
		r3, err := s.DeleteCatalogEntry(ctx, e.Ref(), r2)
		if err != nil || r3 <= r2 {
			t.Fatalf("delete = %d, %v", r3, err)
		}
		if _, err := s.GetCatalogEntry(ctx, e.Ref()); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("get after delete err = %v, want ErrNotFound", err)
		}
		if all, err := s.ListCatalog(ctx); err != nil || len(all) != 0 {
			t.Errorf("list after delete = %v, %v", all, err)
		}
		if _, err := s.CreateCatalogEntry(ctx, e); err != nil {
			t.Errorf("re-create after delete: %v", err)
		}
	})
}
