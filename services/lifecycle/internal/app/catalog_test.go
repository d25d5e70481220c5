package app_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/memory"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/natskv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// catalogStore is a store with a catalog, as both real adapters are.
type catalogStore interface {
	ports.Store
	ports.CatalogStore
}

// stores runs f against the in-memory fake and against NATS KV.
func stores(t *testing.T, f func(t *testing.T, s catalogStore)) {
	t.Run("memory", func(t *testing.T) { f(t, memory.NewStore()) })
	t.Run("natskv", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts NATS")
		}
		env := natstest.Start(t)
		s, err := natskv.Open(context.Background(), env.JS)
		if err != nil {
			t.Fatal(err)
		}
		f(t, s)
	})
}

func startApp(t *testing.T, s ports.Store, fileCatalog []domain.CatalogEntry, fileGroups []domain.NodeGroup) *app.App {
	t.Helper()
	opts := app.DefaultOptions()
	opts.ReconcileInterval = 0
	cs, _ := s.(ports.CatalogStore)
	a := app.New(opts, app.Deps{Store: s, Catalog: cs, Commands: &memory.Commands{}, Clock: memory.NewClock(t0),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if fileGroups != nil {
		a.SetConfigCatalog(fileCatalog)
		if err := a.SetConfig(context.Background(), fileGroups); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return a
}

func account(name string, regions ...string) domain.CatalogEntry {
	return domain.CatalogEntry{Account: &domain.Account{Name: name, Regions: regions}}
}

func template(name, acct, instanceType string) domain.CatalogEntry {
	return domain.CatalogEntry{Template: &domain.InstanceTemplate{Name: name, Account: acct, InstanceType: instanceType,
		ParametersJSON: `{"InstanceType":"` + instanceType + `"}`}}
}

func hook(name, script string) domain.CatalogEntry {
	return domain.CatalogEntry{Hook: &domain.HookSpec{Name: name, Script: script, Timeout: time.Minute}}
}

func put(t *testing.T, a *app.App, e domain.CatalogEntry, rev uint64, upsert bool) (app.Revisions, error) {
	t.Helper()
	return a.PutCatalogEntry(context.Background(), app.PutCatalogRequest{Entry: e, ExpectedRevision: rev, Upsert: upsert})
}

func mustPut(t *testing.T, a *app.App, e domain.CatalogEntry) uint64 {
	t.Helper()
	revs, err := put(t, a, e, 0, true)
	if err != nil {
		t.Fatalf("put %s: %v", e.Ref(), err)
	}
	if revs.Catalog == 0 {
		t.Fatalf("put %s wrote no catalog revision", e.Ref())
	}
	return revs.Catalog
}

// apiGroup is a group that names its template and hook only.
func apiGroup(id, tmpl, afterCreated string) domain.NodeGroup {
	g := domain.NodeGroup{ID: id, MinSize: 0, MaxSize: 5, Template: domain.InstanceTemplate{Name: tmpl}}
	if afterCreated != "" {
		g.Hooks.AfterCreated = &domain.HookSpec{Name: afterCreated}
	}
	return g
}

func TestCatalogEntriesResolveIntoGroupsAndChangesPropagate(t *testing.T) {
	stores(t, func(t *testing.T, s catalogStore) {
		ctx := context.Background()
		a := startApp(t, s, nil, nil)
		mustPut(t, a, account("team", "ap-shanghai", "ap-guangzhou"))
		mustPut(t, a, template("big", "team", "S5.LARGE8"))
		mustPut(t, a, hook("join", "kubeadm join v1"))
		e, _, ok := a.CatalogEntry(domain.CatalogRef{Kind: domain.KindTemplate, Name: "big"})
		if !ok || e.Template.Provider != app.DefaultProvider || e.Template.Region != "ap-shanghai" || e.Source != domain.SourceAPI {
			t.Fatalf("template defaults from the account not applied: %+v", e.Template)
		}

		revs, err := a.PutGroup(ctx, app.PutGroupRequest{Group: apiGroup("g1", "big", "join")})
		if err != nil || revs.Groups == 0 {
			t.Fatalf("PutGroup naming catalog entries: %v", err)
		}
		// An inline template with another name is left alone.
		inline := apiGroup("g2", "", "")
		inline.Template = domain.InstanceTemplate{Name: "inline", Provider: "tencentcloud", Account: "team", Region: "r"}
		if _, err := a.PutGroup(ctx, app.PutGroupRequest{Group: inline}); err != nil {
			t.Fatal(err)
		}
		g, _ := a.Group("g1")
		if g.Template.InstanceType != "S5.LARGE8" || g.Template.Account != "team" || g.Hooks.AfterCreated.Script != "kubeadm join v1" {
			t.Fatalf("group did not snapshot the catalog: %+v %+v", g.Template, g.Hooks.AfterCreated)
		}
		if _, err := a.IncreaseSize(ctx, "g1", 1); err != nil {
			t.Fatal(err)
		}
		before := a.Instances("g1")

		revs, err = put(t, a, template("big", "team", "S5.XLARGE16"), 0, true)
		if err != nil {
			t.Fatal(err)
		}
		if revs.Catalog == 0 || revs.Groups == 0 {
			t.Errorf("update wrote catalog %d, groups %d: want both", revs.Catalog, revs.Groups)
		}
		revs, err = put(t, a, hook("join", "kubeadm join v2"), 0, true)
		if err != nil || revs.Groups == 0 {
			t.Fatalf("hook update: %v, %+v", err, revs)
		}
		g, _ = a.Group("g1")
		if g.Template.InstanceType != "S5.XLARGE16" || g.Hooks.AfterCreated.Script != "kubeadm join v2" {
			t.Errorf("group kept the old snapshot: %+v %+v", g.Template, g.Hooks.AfterCreated)
		}
		if g2, _ := a.Group("g2"); g2.Template.Name != "inline" || g2.Template.Region != "r" {
			t.Errorf("an unrelated group changed: %+v", g2.Template)
		}
		after := a.Instances("g1")
		if len(after) != len(before) || after[0].ID != before[0].ID || after[0].State != before[0].State {
			t.Errorf("existing instances changed: %+v -> %+v", before, after)
		}

		// A restart reloads the catalog from the store.
		a.Stop()
		b := startApp(t, s, nil, nil)
		if e, _, ok := b.CatalogEntry(domain.CatalogRef{Kind: domain.KindHook, Name: "join"}); !ok || e.Hook.Script != "kubeadm join v2" {
			t.Errorf("after restart: %+v, %v", e.Hook, ok)
		}
	})
}

func TestCatalogOperationErrors(t *testing.T) {
	stores(t, func(t *testing.T, s catalogStore) {
		ctx := context.Background()
		fileTmpl := domain.InstanceTemplate{Name: "file-tmpl", Provider: "tencentcloud", Account: "file-acct", Region: "ap-guangzhou"}
		fileGroup := domain.NodeGroup{ID: "file-group", MaxSize: 3, Template: fileTmpl}
		a := startApp(t, s, []domain.CatalogEntry{
			{Account: &domain.Account{Name: "file-acct", Provider: "tencentcloud", Regions: []string{"ap-guangzhou"}}},
			{Template: &fileTmpl},
		}, []domain.NodeGroup{fileGroup})
		accRev := mustPut(t, a, account("team", "ap-shanghai"))
		mustPut(t, a, template("big", "team", "S5.LARGE8"))
		mustPut(t, a, hook("join", "x"))
		mustPut(t, a, template("spare", "team", "S5.SMALL1"))
		if _, err := a.PutGroup(ctx, app.PutGroupRequest{Group: apiGroup("g1", "big", "join")}); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name string
			do   func() error
			code domain.Code
			msg  string
		}{
			{"template on an unknown account", func() error { _, err := put(t, a, template("t2", "nobody", "x"), 0, false); return err },
				contract.CodeFailedPrecondition, `cloud account "nobody"`},
			{"provider differs from the account's", func() error {
				e := template("t3", "team", "x")
				e.Template.Provider = "aws"
				_, err := put(t, a, e, 0, false)
				return err
			}, contract.CodeInvalidArgument, "differs from the provider"},
			{"create of an existing entry", func() error { _, err := put(t, a, account("team"), 0, false); return err },
				contract.CodeAlreadyExists, "already exists"},
			{"stale revision", func() error { _, err := put(t, a, account("team"), accRev-1, false); return err },
				contract.CodeAborted, "changed"},
			{"revision of a missing entry", func() error { _, err := put(t, a, account("ghost"), 3, false); return err },
				contract.CodeNotFound, "not found"},
			{"invalid name", func() error { _, err := put(t, a, hook("bad name", "x"), 0, false); return err },
				contract.CodeInvalidArgument, "invalid hook"},
			{"empty key token in the name", func() error { _, err := put(t, a, hook("a..b", "x"), 0, false); return err },
				contract.CodeInvalidArgument, `must not contain ".."`},
			{"hook without script", func() error { _, err := put(t, a, hook("empty", ""), 0, false); return err },
				contract.CodeInvalidArgument, "script"},
			{"changing a file entry", func() error { _, err := put(t, a, account("file-acct"), 0, true); return err },
				contract.CodeFailedPrecondition, "configuration file"},
			{"deleting a file entry", func() error {
				_, err := a.DeleteCatalogEntry(ctx, domain.CatalogRef{Kind: domain.KindTemplate, Name: "file-tmpl"}, 0)
				return err
			}, contract.CodeFailedPrecondition, "configuration file"},
			{"deleting a template a group uses", func() error {
				_, err := a.DeleteCatalogEntry(ctx, domain.CatalogRef{Kind: domain.KindTemplate, Name: "big"}, 0)
				return err
			}, contract.CodeFailedPrecondition, "node groups g1"},
			{"deleting a hook a group uses", func() error {
				_, err := a.DeleteCatalogEntry(ctx, domain.CatalogRef{Kind: domain.KindHook, Name: "join"}, 0)
				return err
			}, contract.CodeFailedPrecondition, "node groups g1"},
			{"deleting an account templates use", func() error {
				_, err := a.DeleteCatalogEntry(ctx, domain.CatalogRef{Kind: domain.KindAccount, Name: "team"}, 0)
				return err
			}, contract.CodeFailedPrecondition, "instance templates big, spare and node groups g1"},
			{"deleting a missing entry", func() error {
				_, err := a.DeleteCatalogEntry(ctx, domain.CatalogRef{Kind: domain.KindHook, Name: "ghost"}, 0)
				return err
			}, contract.CodeNotFound, "not found"},
			{"group naming an unknown template", func() error {
				_, err := a.PutGroup(ctx, app.PutGroupRequest{Group: apiGroup("g9", "ghost", "")})
				return err
			}, contract.CodeInvalidArgument, `unknown instance template "ghost"`},
			{"group naming an unknown hook", func() error {
				_, err := a.PutGroup(ctx, app.PutGroupRequest{Group: apiGroup("g9", "big", "ghost")})
				return err
			}, contract.CodeInvalidArgument, `unknown hook "ghost"`},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				err := tc.do()
				if domain.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
					t.Fatalf("err = %v (%s), want %s containing %q", err, domain.CodeOf(err), tc.code, tc.msg)
				}
			})
		}
		// An unused entry can be deleted, at its revision.
		_, rev, _ := a.CatalogEntry(domain.CatalogRef{Kind: domain.KindTemplate, Name: "spare"})
		revs, err := a.DeleteCatalogEntry(ctx, domain.CatalogRef{Kind: domain.KindTemplate, Name: "spare"}, rev)
		if err != nil || revs.Catalog <= rev {
			t.Fatalf("deleting an unused template: %+v, %v", revs, err)
		}
	})
}

// A crash between the catalog write and the group writes: the next leader
// converges the groups.
func TestCatalogChangeConvergesAfterACrashMidway(t *testing.T) {
	stores(t, func(t *testing.T, s catalogStore) {
		ctx := context.Background()
		a := startApp(t, s, nil, nil)
		mustPut(t, a, account("team", "r1"))
		mustPut(t, a, template("big", "team", "v1"))
		for _, id := range []string{"g1", "g2"} {
			if _, err := a.PutGroup(ctx, app.PutGroupRequest{Group: apiGroup(id, "big", "")}); err != nil {
				t.Fatal(err)
			}
		}
		a.Stop()
		// What the crashed leader got to write: the catalog entry only.
		cur, err := s.GetCatalogEntry(ctx, domain.CatalogRef{Kind: domain.KindTemplate, Name: "big"})
		if err != nil {
			t.Fatal(err)
		}
		cur.Entry.Template.InstanceType = "v2"
		if _, err := s.UpdateCatalogEntry(ctx, cur.Entry, cur.Revision); err != nil {
			t.Fatal(err)
		}
		b := startApp(t, s, nil, nil)
		if g, _ := b.Group("g1"); g.Template.InstanceType != "v1" {
			t.Fatalf("precondition: the group should still hold the old snapshot, has %q", g.Template.InstanceType)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- b.RunCatalogConverger(rctx) }()
		eventually(t, func() bool {
			g1, _ := b.Group("g1")
			g2, _ := b.Group("g2")
			return g1.Template.InstanceType == "v2" && g2.Template.InstanceType == "v2"
		})
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		stored, err := s.GetGroup(ctx, "g2")
		if err != nil || stored.Group.Template.InstanceType != "v2" {
			t.Errorf("the store holds %q, %v", stored.Group.Template.InstanceType, err)
		}
	})
}

// A store failure while re-snapshotting: the write is reported done (the
// entry is stored) and the converger finishes the groups.
func TestCatalogChangeConvergesAfterAGroupWriteFails(t *testing.T) {
	s := memory.NewStore()
	ctx := context.Background()
	a := startApp(t, s, nil, nil)
	mustPut(t, a, account("team", "r1"))
	mustPut(t, a, template("big", "team", "v1"))
	if _, err := a.PutGroup(ctx, app.PutGroupRequest{Group: apiGroup("g1", "big", "")}); err != nil {
		t.Fatal(err)
	}
	s.FailNext(nil, errors.New("store down")) // the catalog write succeeds, the group write fails
	revs, err := put(t, a, template("big", "team", "v2"), 0, true)
	if err != nil || revs.Catalog == 0 || revs.Groups != 0 {
		t.Fatalf("put = %+v, %v: want the catalog written and no group", revs, err)
	}
	if g, _ := a.Group("g1"); g.Template.InstanceType != "v1" {
		t.Fatalf("precondition: group has %q", g.Template.InstanceType)
	}
	if err := a.ConvergeCatalog(ctx); err != nil {
		t.Fatal(err)
	}
	if g, _ := a.Group("g1"); g.Template.InstanceType != "v2" {
		t.Errorf("after converging the group has %q", g.Template.InstanceType)
	}
	// Converged is a fixed point: another pass writes nothing.
	writes := s.Writes()
	if err := a.ConvergeCatalog(ctx); err != nil || s.Writes() != writes {
		t.Errorf("a converged catalog was written again (%d writes, %v)", s.Writes()-writes, err)
	}
}

// The file's accounts and templates are catalog entries owned by the
// file, exactly like file groups.
func TestCatalogFromTheConfigurationFile(t *testing.T) {
	stores(t, func(t *testing.T, s catalogStore) {
		ctx := context.Background()
		acct := domain.Account{Name: "dev", Provider: "tencentcloud", Regions: []string{"ap-guangzhou"}}
		small := domain.InstanceTemplate{Name: "small", Provider: "tencentcloud", Account: "dev", Region: "ap-guangzhou", InstanceType: "S5.SMALL1"}
		old := domain.InstanceTemplate{Name: "old", Provider: "tencentcloud", Account: "dev", Region: "ap-guangzhou"}
		fileGroup := domain.NodeGroup{ID: "workers", MaxSize: 3, Template: small}
		file := []domain.CatalogEntry{{Account: &acct}, {Template: &small}, {Template: &old}}
		a := startApp(t, s, file, []domain.NodeGroup{fileGroup})
		e, _, ok := a.CatalogEntry(domain.CatalogRef{Kind: domain.KindTemplate, Name: "small"})
		if !ok || e.Source != domain.SourceConfig || e.Template.InstanceType != "S5.SMALL1" {
			t.Fatalf("file template not in the catalog: %+v", e)
		}
		// Applying the same file again writes nothing.
		if ms, ok := s.(*memory.Store); ok {
			writes := ms.Writes()
			a.SetConfigCatalog(file)
			if err := a.SetConfig(ctx, []domain.NodeGroup{fileGroup}); err != nil {
				t.Fatal(err)
			}
			if ms.Writes() != writes {
				t.Errorf("re-applying an unchanged file wrote %d records", ms.Writes()-writes)
			}
		}
		// An API entry with a name the file later defines wins.
		mustPut(t, a, hook("join", "api"))
		mustPut(t, a, template("mine", "dev", "X"))
		// An API group uses the file's template by name.
		if _, err := a.PutGroup(ctx, app.PutGroupRequest{Group: apiGroup("api-group", "small", "")}); err != nil {
			t.Fatal(err)
		}

		// Reload: "small" changes, "old" leaves the file, the file now also
		// defines "mine" (which the API owns).
		small2 := small
		small2.InstanceType = "S5.SMALL2"
		mine := domain.InstanceTemplate{Name: "mine", Provider: "tencentcloud", Account: "dev", Region: "ap-guangzhou", InstanceType: "FILE"}
		fileGroup.Template = small2
		a.SetConfigCatalog([]domain.CatalogEntry{{Account: &acct}, {Template: &small2}, {Template: &mine}})
		if err := a.SetConfig(ctx, []domain.NodeGroup{fileGroup}); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := a.CatalogEntry(domain.CatalogRef{Kind: domain.KindTemplate, Name: "old"}); ok {
			t.Error("a template removed from the file and unused is still in the catalog")
		}
		if e, _, _ := a.CatalogEntry(domain.CatalogRef{Kind: domain.KindTemplate, Name: "mine"}); e.Source != domain.SourceAPI || e.Template.InstanceType != "X" {
			t.Errorf("the file overwrote an API entry: %+v", e)
		}
		for _, id := range []string{"workers", "api-group"} {
			if g, _ := a.Group(id); g.Template.InstanceType != "S5.SMALL2" {
				t.Errorf("group %s has %q after the file changed the template", id, g.Template.InstanceType)
			}
		}
		// The file's account is still used: removing it from the file keeps it.
		a.SetConfigCatalog(nil)
		if err := a.SetConfig(ctx, []domain.NodeGroup{}); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := a.CatalogEntry(domain.CatalogRef{Kind: domain.KindAccount, Name: "dev"}); !ok {
			t.Error("an account that templates still use was deleted")
		}
	})
}
