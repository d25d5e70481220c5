package rest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/libs/sealed"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/rest"
)

// Hook env values and template secret parameters written through the
// admin API leave the gateway sealed, bound to their names; answers only
// say they are sealed.
func TestHookEnvAndSecretParametersAreSealed(t *testing.T) {
	key := testKey(t)
	f, logs := newCatalogFixture(t, key)
	admin := func(method, path, body string) response {
		t.Helper()
		return f.do(t, call{method: method, path: path, token: adminToken, body: body})
	}
	if r := admin("PUT", "/api/v1/accounts/team", `{"regions":["ap-shanghai"]}`); r.status != http.StatusCreated {
		t.Fatalf("account: %d %s", r.status, r.body)
	}

	r := admin("PUT", "/api/v1/hooks/join", `{"script":"kubeadm join","env":{"JOIN_TOKEN":"hook-env-secret-1"}}`)
	if r.status != http.StatusCreated || strings.Contains(string(r.body), "hook-env-secret-1") {
		t.Fatalf("put hook: %d %s", r.status, r.body)
	}
	var hi rest.HookInfo
	if err := json.Unmarshal(r.body, &hi); err != nil {
		t.Fatal(err)
	}
	tok := lastCatalogPut(t, f).GetEntry().GetHook().GetEnv()["JOIN_TOKEN"]
	if v, err := key.OpenString(sealed.PurposeHookEnv, "JOIN_TOKEN", tok); err != nil || v != "hook-env-secret-1" {
		t.Fatalf("hook env sent as %q: %q, %v", tok, v, err)
	}

	r = admin("PUT", "/api/v1/templates/big", `{"account":"team","zone":"ap-shanghai-2","instanceType":"S5.LARGE8",
		"parameters":{"ImageId":"img-1"},"hookEnv":{"API_TOKEN":"tmpl-env-secret-2"},
		"secretParameters":{"LoginSettings":{"Password":"param-secret-3"}}}`)
	if r.status != http.StatusCreated || strings.Contains(string(r.body), "secret-") {
		t.Fatalf("put template: %d %s", r.status, r.body)
	}
	var ti rest.TemplateInfo
	if err := json.Unmarshal(r.body, &ti); err != nil {
		t.Fatal(err)
	}
	if ti.HookEnv["API_TOKEN"] != sealed.RedactedSealed || ti.SecretParameters["LoginSettings"] != sealed.RedactedSealed {
		t.Errorf("template answer = %s", r.body)
	}
	tm := lastCatalogPut(t, f).GetEntry().GetTemplate()
	if strings.Contains(tm.String(), "secret-") {
		t.Fatalf("template sent with a plaintext secret: %v", tm)
	}
	if v, err := key.OpenString(sealed.PurposeHookEnv, "API_TOKEN", tm.GetHookEnv()["API_TOKEN"]); err != nil || v != "tmpl-env-secret-2" {
		t.Errorf("hookEnv: %q, %v", v, err)
	}
	if v, err := key.OpenString(sealed.PurposeTemplateParameter, "LoginSettings", tm.GetSecretParameters()["LoginSettings"]); err != nil || v != `{"Password":"param-secret-3"}` {
		t.Errorf("secretParameters: %q, %v", v, err)
	}
	if strings.Contains(logs.String(), "secret-") {
		t.Error("a secret is logged")
	}

	// Without a key nothing secret is accepted.
	nf, _ := newCatalogFixture(t, nil)
	r = nf.do(t, call{method: "PUT", path: "/api/v1/hooks/join", token: adminToken, body: `{"script":"x","env":{"A":"b"}}`})
	if r.status != http.StatusServiceUnavailable {
		t.Errorf("hook env without a key: %d %s", r.status, r.body)
	}
}

// A group's inline template and hooks are sealed too, and a PATCH keeps
// the stored tokens (it never double-seals them).
func TestGroupInlineSecretsAreSealed(t *testing.T) {
	key := testKey(t)
	f, _ := newCatalogFixture(t, key)
	body := `{"minSize":0,"maxSize":5,
  "instanceTemplate":{"name":"inl","provider":"other","account":"a","region":"r","hookEnv":{"T_ENV":"inline-tmpl-secret"},
    "secretParameters":{"Password":"inline-param-secret"}},
  "hooks":{"afterCreated":{"script":"x","env":{"H_ENV":"inline-hook-secret"}}}}`
	f.answerSetTarget()
	r := f.do(t, call{method: "PUT", path: "/api/v1/nodegroups/inl", token: adminToken, body: body})
	if r.status != http.StatusCreated || strings.Contains(string(r.body), "inline-") {
		t.Fatalf("put group: %d %s", r.status, r.body)
	}
	check := func() {
		t.Helper()
		g := lastPut(t, f).GetGroup()
		if strings.Contains(g.String(), "inline-") {
			t.Fatalf("group sent with a plaintext secret: %v", g)
		}
		for _, c := range []struct{ purpose, name, tok, want string }{
			{sealed.PurposeHookEnv, "T_ENV", g.GetInstanceTemplate().GetHookEnv()["T_ENV"], "inline-tmpl-secret"},
			{sealed.PurposeTemplateParameter, "Password", g.GetInstanceTemplate().GetSecretParameters()["Password"], `"inline-param-secret"`},
			{sealed.PurposeHookEnv, "H_ENV", g.GetHooks().GetAfterCreated().GetEnv()["H_ENV"], "inline-hook-secret"},
		} {
			if v, err := key.OpenString(c.purpose, c.name, c.tok); err != nil || v != c.want {
				t.Errorf("%s: %q, %v", c.name, v, err)
			}
		}
	}
	check()
	r = f.do(t, call{method: "PATCH", path: "/api/v1/nodegroups/inl", token: adminToken, body: `{"maxSize":4}`,
		header: map[string]string{"Content-Type": "application/merge-patch+json"}})
	if r.status != http.StatusOK || strings.Contains(string(r.body), "inline-") {
		t.Fatalf("patch: %d %s", r.status, r.body)
	}
	check()
}
