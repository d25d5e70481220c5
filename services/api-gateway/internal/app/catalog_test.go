package app_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// catalogFixture defines three groups: web and web2 share template
// "small" (web2's snapshot is older and differs) on account "prod";
// gpu uses "large" on "prod" in another region; adhoc has an unnamed
// template on account "dev".
func catalogFixture(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	at := func(min int) time.Time {
		return time.Date(2026, 1, 1, 0, min, 0, 0, time.UTC)
	}
	join := &domain.HookSpec{Name: "join", Script: "kubeadm join --token s3cr3t", Env: map[string]string{"T": "x"}, Timeout: time.Minute}
	drain := &domain.HookSpec{Name: "drain", Script: "kubectl drain", OnFailure: domain.OnFailureBlock}
	put := func(id string, updated int, tpl *domain.InstanceTemplate, hooks *domain.Hooks) {
		f.rm.PutGroup(id, f.next(), &domain.NodeGroup{ID: id, MaxSize: 5, InstanceTemplate: tpl, Hooks: hooks, UpdatedAt: at(updated)})
	}
	put("web", 10, &domain.InstanceTemplate{Name: "small", Provider: "tencentcloud", Account: "prod", Region: "ap-guangzhou", InstanceType: "S5.MEDIUM4", ParametersJSON: `{"LoginSettings":{"Password":"p"}}`},
		&domain.Hooks{AfterCreated: join, BeforeDelete: drain})
	put("web2", 5, &domain.InstanceTemplate{Name: "small", Provider: "tencentcloud", Account: "prod", Region: "ap-guangzhou", InstanceType: "S5.SMALL2"},
		&domain.Hooks{AfterCreated: join})
	put("gpu", 7, &domain.InstanceTemplate{Name: "large", Provider: "tencentcloud", Account: "prod", Region: "ap-shanghai", InstanceType: "GN7.LARGE20"}, nil)
	put("adhoc", 1, &domain.InstanceTemplate{Provider: "tencentcloud", Account: "dev", Region: "ap-guangzhou"},
		&domain.Hooks{AfterCreated: &domain.HookSpec{Script: "true"}})
	return f
}

func TestTemplates(t *testing.T) {
	f := catalogFixture(t)
	got, err := f.svc.Templates()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range got {
		names = append(names, fmt.Sprintf("%s%v divergent=%v", v.Name, v.Groups, v.Divergent))
	}
	want := []string{"large[gpu] divergent=false", "small[web web2] divergent=true"}
	if !slices.Equal(names, want) {
		t.Fatalf("Templates = %v, want %v", names, want)
	}
	// The newest group's snapshot represents the template.
	if it := got[1].Template.InstanceType; it != "S5.MEDIUM4" {
		t.Errorf("small shows instance type %q, want web's (the newest) S5.MEDIUM4", it)
	}
	if v, err := f.svc.Template("large"); err != nil || v.Template.Region != "ap-shanghai" {
		t.Errorf("Template(large) = %+v, %v", v, err)
	}
	if _, err := f.svc.Template("nope"); codeOf(err) != contract.CodeNotFound {
		t.Errorf("unknown template: %v, want not found", err)
	}
}

func TestAccounts(t *testing.T) {
	f := catalogFixture(t)
	got, err := f.svc.Accounts()
	if err != nil {
		t.Fatal(err)
	}
	var desc []string
	for _, v := range got {
		desc = append(desc, fmt.Sprintf("%s/%s regions=%v templates=%v groups=%v", v.Name, v.Provider, v.Regions, v.Templates, v.Groups))
	}
	want := []string{
		"dev/tencentcloud regions=[ap-guangzhou] templates=[] groups=[adhoc]",
		"prod/tencentcloud regions=[ap-guangzhou ap-shanghai] templates=[large small] groups=[gpu web web2]",
	}
	if !slices.Equal(desc, want) {
		t.Fatalf("Accounts =\n%v\nwant\n%v", desc, want)
	}
	if _, err := f.svc.Account("prod"); err != nil {
		t.Errorf("Account(prod): %v", err)
	}
	if _, err := f.svc.Account("nope"); codeOf(err) != contract.CodeNotFound {
		t.Errorf("unknown account: %v, want not found", err)
	}
}

func TestHooks(t *testing.T) {
	f := catalogFixture(t)
	got, err := f.svc.Hooks()
	if err != nil {
		t.Fatal(err)
	}
	var desc []string
	for _, v := range got {
		desc = append(desc, fmt.Sprintf("%s/%s%v divergent=%v", v.Phase, v.Name, v.Groups, v.Divergent))
	}
	want := []string{"afterCreated/join[web web2] divergent=false", "beforeDelete/drain[web] divergent=false"}
	if !slices.Equal(desc, want) {
		t.Fatalf("Hooks = %v, want %v", desc, want)
	}
}

func TestCatalogNeedsSync(t *testing.T) {
	svc := app.NewService(app.NewReadModel(), nil, app.Config{}, nil)
	if _, err := svc.Templates(); codeOf(err) != contract.CodeUnavailable {
		t.Errorf("Templates before sync: %v", err)
	}
	if _, err := svc.RecentTransitions("", 10); codeOf(err) != contract.CodeUnavailable {
		t.Errorf("RecentTransitions before sync: %v", err)
	}
}

func TestRecentTransitions(t *testing.T) {
	f := newFixture(t)
	f.group("a", 0, 10, 0)
	f.group("b", 0, 10, 0)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tr := func(sec int, to domain.InstanceState) domain.Transition {
		return domain.NewTransition(domain.StateUnspecified, to, fmt.Sprint(sec), base.Add(time.Duration(sec)*time.Second))
	}
	// Interleaved histories: the answer merges them by time.
	f.instance("a", "i-1", domain.StateRunning, func(in *domain.Instance) {
		in.History = []domain.Transition{tr(1, 2), tr(4, 3), tr(9, 5)}
	})
	f.instance("a", "i-2", domain.StateDeleted, func(in *domain.Instance) {
		in.History = []domain.Transition{tr(2, 2), tr(3, 8)}
	})
	f.instance("b", "i-3", domain.StateCreating, func(in *domain.Instance) {
		in.History = []domain.Transition{tr(5, 2), tr(7, 2)}
	})
	reasons := func(group string, limit int) []string {
		t.Helper()
		got, err := f.svc.RecentTransitions(group, limit)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range got {
			out = append(out, v.Instance+"@"+v.Transition.Reason)
		}
		return out
	}
	if got, want := reasons("", 4), []string{"i-1@9", "i-3@7", "i-3@5", "i-1@4"}; !slices.Equal(got, want) {
		t.Errorf("newest 4 = %v, want %v", got, want)
	}
	if got, want := reasons("a", 100), []string{"i-1@9", "i-1@4", "i-2@3", "i-2@2", "i-1@1"}; !slices.Equal(got, want) {
		t.Errorf("group a = %v, want %v", got, want)
	}
	for _, limit := range []int{0, app.MaxTransitions + 1} {
		if _, err := f.svc.RecentTransitions("", limit); codeOf(err) != contract.CodeInvalidArgument {
			t.Errorf("limit %d: %v, want invalid argument", limit, err)
		}
	}
}

func TestListInstancesByStates(t *testing.T) {
	f := newFixture(t)
	f.group("a", 0, 10, 0)
	for i, st := range []domain.InstanceState{1, 2, 5, 5, 8} {
		f.instance("a", fmt.Sprintf("i-%d", i), st)
	}
	page, err := f.svc.ListInstances(app.InstanceQuery{States: []domain.InstanceState{domain.StatePending, domain.StateRunning}, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, v := range page.Items {
		keys = append(keys, v.Key)
	}
	if want := []string{"a.i-0", "a.i-2", "a.i-3"}; !slices.Equal(keys, want) {
		t.Fatalf("PENDING or RUNNING = %v, want %v", keys, want)
	}
}

// Catalog entries are listed from the catalog bucket; groups add who uses
// them, and a group holding another version marks the entry divergent.
func TestCatalogEntriesComeFromTheCatalogBucket(t *testing.T) {
	f := catalogFixture(t)
	small := &domain.InstanceTemplate{Name: "small", Provider: "tencentcloud", Account: "prod", Region: "ap-guangzhou", InstanceType: "S5.MEDIUM4", ParametersJSON: `{"LoginSettings":{"Password":"p"}}`}
	f.rm.PutCatalog(app.CatalogKey(app.KindTemplates, "small"), f.next(), &domain.CatalogEntry{Template: small, Source: "api"})
	f.rm.PutCatalog(app.CatalogKey(app.KindTemplates, "unused"), f.next(), &domain.CatalogEntry{Template: &domain.InstanceTemplate{Name: "unused", Account: "team"}, Source: "api"})
	f.rm.PutCatalog(app.CatalogKey(app.KindAccounts, "team"), f.next(), &domain.CatalogEntry{Account: &domain.CloudAccount{
		Name: "team", Provider: "tencentcloud", Regions: []string{"ap-shanghai", "ap-beijing"}, SealedCredentials: []byte{1}, KeyID: "k1"}, Source: "api"})
	hookRev := f.next()
	f.rm.PutCatalog(app.CatalogKey(app.KindHooks, "join"), hookRev, &domain.CatalogEntry{Hook: &domain.HookSpec{Name: "join", Script: "other"}, Source: "config"})

	tpls, err := f.svc.Templates()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range tpls {
		names = append(names, fmt.Sprintf("%s%v divergent=%v source=%q", v.Name, v.Groups, v.Divergent, v.Source))
	}
	want := []string{`large[gpu] divergent=false source=""`, `small[web web2] divergent=true source="api"`, `unused[] divergent=false source="api"`}
	if !slices.Equal(names, want) {
		t.Fatalf("Templates = %v, want %v", names, want)
	}
	acct, err := f.svc.Account("team")
	if err != nil || !acct.HasSealedCredentials || acct.KeyID != "k1" || !slices.Equal(acct.Regions, []string{"ap-shanghai", "ap-beijing"}) ||
		!slices.Equal(acct.Templates, []string{"unused"}) || acct.Revision == 0 {
		t.Errorf("Account(team) = %+v, %v", acct, err)
	}
	h, err := f.svc.Hook("join")
	if err != nil || h.Phase != "" || h.Source != "config" || h.Revision != hookRev || !h.Divergent || !slices.Equal(h.Groups, []string{"web", "web2"}) {
		t.Errorf("Hook(join) = %+v, %v", h, err)
	}
	// Deleted from the bucket: the template is inline-only again.
	f.rm.DeleteCatalog(app.CatalogKey(app.KindTemplates, "small"), f.next())
	if v, err := f.svc.Template("small"); err != nil || v.Source != "" || v.Revision != 0 {
		t.Errorf("after the delete: %+v, %v", v, err)
	}
}

func TestCatalogWritesCheckRevisionsFirst(t *testing.T) {
	f := newFixture(t)
	e := &domain.CatalogEntry{Hook: &domain.HookSpec{Name: "h", Script: "x"}}
	f.rm.PutCatalog(app.CatalogKey(app.KindHooks, "h"), f.next(), e)
	ctx := t.Context()
	tests := []struct {
		name string
		err  error
		want domain.Code
	}{
		{"create over existing", func() error { _, _, err := f.svc.PutCatalogEntry(ctx, e, 0, false); return err }(), contract.CodeAlreadyExists},
		{"stale revision", func() error { _, _, err := f.svc.PutCatalogEntry(ctx, e, 99, false); return err }(), contract.CodeAborted},
		{"missing entry with revision", func() error {
			_, _, err := f.svc.PutCatalogEntry(ctx, &domain.CatalogEntry{Hook: &domain.HookSpec{Name: "ghost"}}, 3, false)
			return err
		}(), contract.CodeNotFound},
		{"empty entry", func() error { _, _, err := f.svc.PutCatalogEntry(ctx, &domain.CatalogEntry{}, 0, false); return err }(), contract.CodeInvalidArgument},
		{"delete unknown kind", f.svc.DeleteCatalogEntry(ctx, "widgets", "h", 0), contract.CodeInvalidArgument},
		{"delete missing", f.svc.DeleteCatalogEntry(ctx, app.KindHooks, "ghost", 0), contract.CodeNotFound},
		{"delete stale", f.svc.DeleteCatalogEntry(ctx, app.KindHooks, "h", 99), contract.CodeAborted},
	}
	for _, tc := range tests {
		if codeOf(tc.err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, tc.err, tc.want)
		}
	}
	if n := len(f.lc.Calls()); n != 0 {
		t.Errorf("%d refused writes reached lifecycle", n)
	}
}
