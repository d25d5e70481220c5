package app_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/libs/sealed"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/memory"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

func ringOf(t *testing.T, keys ...byte) *sealed.Key {
	t.Helper()
	var ks []*sealed.Key
	for _, b := range keys {
		k, err := sealed.NewKey(bytes.Repeat([]byte{b}, sealed.KeySize))
		if err != nil {
			t.Fatal(err)
		}
		ks = append(ks, k)
	}
	r, err := sealed.NewRing(ks...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sealedValues returns every hook env value and secret parameter lifecycle
// holds (catalog and groups), by "<where>/<name>".
func sealedValues(a *app.App) map[string][2]string {
	out := map[string][2]string{}
	add := func(where, purpose string, m map[string]string) {
		for k, v := range m {
			out[where+"/"+k] = [2]string{purpose, v}
		}
	}
	if e, _, ok := a.CatalogEntry(domain.CatalogRef{Kind: domain.KindTemplate, Name: "small"}); ok {
		add("template", sealed.PurposeHookEnv, e.Template.HookEnv)
		add("template-params", sealed.PurposeTemplateParameter, e.Template.SecretParameters)
	}
	if e, _, ok := a.CatalogEntry(domain.CatalogRef{Kind: domain.KindHook, Name: "join"}); ok {
		add("hook", sealed.PurposeHookEnv, e.Hook.Env)
	}
	if g, ok := a.Group("workers"); ok {
		add("group-template", sealed.PurposeHookEnv, g.Template.HookEnv)
		add("group-params", sealed.PurposeTemplateParameter, g.Template.SecretParameters)
		add("group-hook", sealed.PurposeHookEnv, g.Hooks.AfterCreated.Env)
	}
	return out
}

var plaintexts = map[string]string{
	"template/SECRET": "alpha-secret", "template-params/Password": `"pw-secret"`, "hook/TOKEN": "beta-secret",
	"group-template/SECRET": "alpha-secret", "group-params/Password": `"pw-secret"`, "group-hook/JOIN_TOKEN": "gamma-secret",
}

// TestRotation walks the key rotation procedure of the README: values
// sealed under key A; add key B as the first line and roll out; lifecycle
// re-seals every stored value under B and logs it; remove A; everything
// still opens with B alone.
func TestRotation(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	tmpl := domain.InstanceTemplate{
		Name: "small", Provider: "tencentcloud", Account: "dev", Region: "ap-guangzhou",
		HookEnv:          map[string]string{"SECRET": "alpha-secret"},
		SecretParameters: map[string]string{"Password": `"pw-secret"`},
	}
	fileCatalog := []domain.CatalogEntry{
		{Account: &domain.Account{Name: "dev", Provider: "tencentcloud", Regions: []string{"ap-guangzhou"}}},
		{Template: &tmpl},
		{Hook: &domain.HookSpec{Name: "join", Script: "kubeadm join", Env: map[string]string{"TOKEN": "beta-secret"}}},
	}
	g := group("workers", 0, 5, 0)
	g.Template = tmpl
	g.Hooks.AfterCreated.Env = map[string]string{"JOIN_TOKEN": "gamma-secret"}
	var logs bytes.Buffer
	start := func(ring *sealed.Key) *app.App {
		t.Helper()
		opts := app.DefaultOptions()
		opts.ReconcileInterval = 0
		a := app.New(opts, app.Deps{Store: store, Catalog: store, Commands: &memory.Commands{}, Clock: memory.NewClock(t0),
			Logger: slog.New(slog.NewTextHandler(&logs, nil)), Sealer: ring})
		a.SetConfigCatalog(fileCatalog)
		if err := a.SetConfig(ctx, []domain.NodeGroup{g}); err != nil {
			t.Fatal(err)
		}
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.ConvergeCatalog(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Stop)
		return a
	}
	check := func(a *app.App, ring *sealed.Key, wantKey string) map[string][2]string {
		t.Helper()
		vals := sealedValues(a)
		if len(vals) != len(plaintexts) {
			t.Fatalf("found %d sealed values, want %d: %v", len(vals), len(plaintexts), vals)
		}
		for where, pv := range vals {
			if sealed.TokenKeyID(pv[1]) != wantKey {
				t.Errorf("%s: sealed under key %q, want %q", where, sealed.TokenKeyID(pv[1]), wantKey)
			}
			name := where[strings.Index(where, "/")+1:]
			got, err := ring.OpenString(pv[0], name, pv[1])
			if err != nil || got != plaintexts[where] {
				t.Errorf("%s: opens to %q, %v; want %q", where, got, err, plaintexts[where])
			}
		}
		return vals
	}
	keyA, keyB := ringOf(t, 0xA), ringOf(t, 0xB)

	// 1. Sealed under A: nothing is stored in plaintext. Account
	// credentials sealed by the gateway under A are stored with an API
	// account.
	a := start(keyA)
	before := check(a, keyA, keyA.ID())
	creds, err := keyA.SealCredentials("team", sealed.Credentials{KeyID: "id", Secret: "team-secret"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.PutCatalogEntry(ctx, app.PutCatalogRequest{Entry: domain.CatalogEntry{Account: &domain.Account{
		Name: "team", Provider: "tencentcloud", Regions: []string{"ap-guangzhou"}, SealedCredentials: creds, KeyID: keyA.ID(),
	}}}); err != nil {
		t.Fatal(err)
	}
	checkCreds := func(a *app.App, ring *sealed.Key) {
		t.Helper()
		e, _, ok := a.CatalogEntry(domain.CatalogRef{Kind: domain.KindAccount, Name: "team"})
		if !ok || e.Account.KeyID != ring.ID() {
			t.Fatalf("account credentials: %v, under %+v", ok, e.Account)
		}
		if c, err := ring.OpenCredentials("team", e.Account.SealedCredentials, e.Account.KeyID); err != nil || c.Secret != "team-secret" {
			t.Fatalf("account credentials do not open: %v", err)
		}
	}
	// A restart with the same file and key rewrites nothing.
	a.Stop()
	a = start(keyA)
	if after := sealedValues(a); len(after) != len(before) {
		t.Fatal("values changed")
	} else {
		for k, v := range after {
			if before[k] != v {
				t.Errorf("%s was re-sealed although nothing changed", k)
			}
		}
	}

	// 2. Add B as the first line of the ring and roll out: lifecycle
	// re-seals everything under B and says so.
	a.Stop()
	logs.Reset()
	a = start(ringOf(t, 0xB, 0xA))
	check(a, keyB, keyB.ID())
	checkCreds(a, keyB)
	if !strings.Contains(logs.String(), "every stored sealed value is under the newest sealing key") {
		t.Errorf("no log says the re-seal is complete:\n%s", logs.String())
	}

	// 3. Remove A: everything opens with B alone.
	a.Stop()
	a = start(keyB)
	check(a, keyB, keyB.ID())
	checkCreds(a, keyB)
	if _, err := keyA.OpenString(sealed.PurposeHookEnv, "SECRET", sealedValues(a)["template/SECRET"][1]); err == nil {
		t.Error("the removed key A still opens a value")
	}
}

func TestPlaintextSecretsNeedASealer(t *testing.T) {
	store := memory.NewStore()
	a := app.New(app.DefaultOptions(), app.Deps{Store: store, Catalog: store, Commands: &memory.Commands{}, Clock: memory.NewClock(t0),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	g := group("workers", 0, 5, 0)
	g.Hooks.AfterCreated.Env = map[string]string{"JOIN_TOKEN": "gamma-secret"}
	if err := a.SetConfig(context.Background(), []domain.NodeGroup{g}); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	if _, ok := a.Group("workers"); ok {
		t.Fatal("a group with a plaintext hook env value was stored without a sealing key")
	}
}
