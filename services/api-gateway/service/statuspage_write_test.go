package service_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/sealed"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/service"
)

// restCall is one admin API request from the test (not the page).
func restCall(t *testing.T, gw *gateway, token, method, path, body string, header map[string]string) (int, http.Header, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+gw.addrs.REST+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// getJSON reads path with the admin token into out.
func getJSON(t *testing.T, gw *gateway, path string, out any) {
	t.Helper()
	status, _, b := restCall(t, gw, adminToken, "GET", path, "", nil)
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, status, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

type groupState struct {
	MinSize, MaxSize, TargetSize int32
}

// The status page's writes, driven in headless Chromium like an operator
// would: sign in with the admin token, edit a group's bounds and target, a
// template and an account, retry and force-delete instances, lose a race
// against a concurrent edit; then a read-only token sees no write controls
// and a write forged from the page with it is refused. Every write goes
// through the gateway's real REST handlers and the fake lifecycle.
func TestStatusPageAdminWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts headless Chromium; skipped with -short")
	}
	browser := findChromium(t)
	keyFile := filepath.Join(t.TempDir(), "secrets.key")
	key, err := sealed.GenerateKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, func(c *service.Config) {
		c.SecretsKeyFile = keyFile
		// The test clicks faster than an operator (and reads with the
		// same token): the default 10/s per token would refuse some.
		c.RESTRateLimit, c.RESTRateBurst = 1000, 1000
	})

	// A catalog account and template the API owns, and a running VM with
	// a cloud id to force-delete.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seedCatalog := []*statev1.CatalogEntry{
		{Source: "api", Entry: &statev1.CatalogEntry_Account{Account: &statev1.CloudAccount{Name: "team", Provider: "tencentcloud", Regions: []string{"ap-shanghai"}}}},
		{Source: "api", Entry: &statev1.CatalogEntry_Template{Template: &statev1.InstanceTemplate{
			Name: "small", Provider: "tencentcloud", Account: "team", Region: "ap-shanghai", Zone: "ap-shanghai-2", InstanceType: "S5.MEDIUM4", HourlyPrice: 0.2,
			ParametersJson: `{"ImageId":"img-keep","InstanceType":"S5.MEDIUM4","Placement":{"Zone":"ap-shanghai-2"}}`,
		}}},
	}
	for _, e := range seedCatalog {
		if _, err := gw.lifecycle.PutCatalogEntry(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := gw.lifecycle.PutInstance(ctx, &statev1.Instance{
		Id: "i-gpu-2", Group: "gpu", State: statev1.InstanceState_INSTANCE_STATE_RUNNING, CloudId: "ins-gpu2",
		ProviderId: "tencentcloud:///ap-guangzhou-4/ins-gpu2", NodeName: "10.0.1.2",
	}); err != nil {
		t.Fatal(err)
	}

	// NODESMITH_SCREENSHOT_DIR keeps screenshots of the forms for a
	// person to see.
	shots := os.Getenv("NODESMITH_SCREENSHOT_DIR")
	b := startBrowser(t, browser)
	page := b.open("http://" + gw.addrs.REST + "/ui/")

	// Sign in through the form, as the page already asks for a token.
	page.waitFor(t, `document.body.dataset.state === 'login'`, "the sign-in form")
	page.set(t, "#token", adminToken)
	page.click(t, "#login-form button[type=submit]")
	page.waitFor(t, `document.body.dataset.state === 'loaded' && document.body.dataset.role === 'admin'`, "the page to load as admin")
	page.waitFor(t, `document.querySelector('tr[data-instance="i-gpu-2"]') && document.querySelector('tr[data-template="small"]')`, "the seeded instance and template")
	var inURL bool
	page.eval(t, `location.href.includes(`+strconv.Quote(adminToken)+`) || document.documentElement.outerHTML.includes(`+strconv.Quote(adminToken)+`)`, &inURL)
	if inURL {
		t.Error("the admin token is in the URL or the DOM")
	}

	t.Run("group max and target", func(t *testing.T) {
		page.click(t, `button[data-action="edit-group"][data-id="gpu"]`)
		page.waitFor(t, `!document.getElementById('group-form').hidden && document.querySelector('#group-form [name=maxSize]').value === '4'`, "the gpu group form")
		// Rendered, not just unhidden: only this form is on screen.
		var shown []string
		page.eval(t, `[...document.querySelectorAll('form.edit')].filter((f) => f.getClientRects().length > 0).map((f) => f.id)`, &shown)
		if len(shown) != 1 || shown[0] != "group-form" {
			t.Errorf("forms on screen = %v, want only group-form", shown)
		}
		page.set(t, "#group-form [name=maxSize]", "6")
		page.set(t, "#group-form [name=targetSize]", "5")
		page.screenshot(t, shots, "status-admin-group-form.png")
		page.click(t, "#group-form button[type=submit]")
		page.waitFor(t, `document.getElementById('notice').textContent.includes('target 5')`, "the saved notice")
		var g groupState
		getJSON(t, gw, "/api/v1/nodegroups/gpu", &g)
		if g.MinSize != 0 || g.MaxSize != 6 || g.TargetSize != 5 {
			t.Errorf("gpu after the form = %+v, want min 0 max 6 target 5", g)
		}
		// The table shows it after the refresh the save triggers.
		page.waitFor(t, `(() => { const c = document.querySelectorAll('tr[data-group="gpu"] td'); return c[2].textContent === '6' && c[3].textContent === '5'; })()`, "the gpu row with max 6, target 5")
		if !strings.Contains(page.text(t, "#notice"), "bounds 0..6") {
			t.Errorf("notice = %q", page.text(t, "#notice"))
		}
	})

	t.Run("config group: target only", func(t *testing.T) {
		page.click(t, `button[data-action="edit-group"][data-id="web"]`)
		page.waitFor(t, `!document.getElementById('group-form').hidden && document.querySelector('#group-form [name=targetSize]').value === '3'`, "the web group form")
		var disabled bool
		page.eval(t, `document.querySelector('#group-form [name=maxSize]').disabled && !document.querySelector('#group-form [data-field="config-note"]').hidden`, &disabled)
		if !disabled {
			t.Error("the bounds of a group from the configuration file are editable")
		}
		page.set(t, "#group-form [name=targetSize]", "11") // above max 10: the API says why
		var valid bool
		page.eval(t, `document.getElementById('group-form').checkValidity()`, &valid)
		if !valid {
			t.Fatal("the form refuses the value before the API sees it")
		}
		page.click(t, "#group-form button[type=submit]")
		page.waitFor(t, `!document.querySelector('#group-form .form-error').hidden`, "the error next to the form")
		msg := page.text(t, "#group-form .form-error")
		page.screenshot(t, shots, "status-admin-error.png")
		if !strings.Contains(msg, "Not saved") || !strings.Contains(msg, "11") || !strings.Contains(msg, "field: targetSize") {
			t.Errorf("form error = %q", msg)
		}
		page.click(t, `#group-form [data-action="close-editor"]`)
		page.waitFor(t, `document.getElementById('editor').hidden`, "the editor to close")
	})

	t.Run("concurrent edit is refused", func(t *testing.T) {
		page.click(t, `button[data-action="edit-group"][data-id="gpu"]`)
		page.waitFor(t, `!document.getElementById('group-form').hidden && document.querySelector('#group-form [name=maxSize]').value === '6'`, "the gpu group form")
		// Someone else changes the group after the form loaded.
		status, _, body := restCall(t, gw, adminToken, "PATCH", "/api/v1/nodegroups/gpu", `{"maxSize":8}`, nil)
		if status != http.StatusOK {
			t.Fatalf("concurrent PATCH: %d %s", status, body)
		}
		page.set(t, "#group-form [name=maxSize]", "7")
		page.click(t, "#group-form button[type=submit]")
		page.waitFor(t, `!document.querySelector('#group-form .form-error').hidden`, "the conflict message")
		page.screenshot(t, shots, "status-admin-conflict.png")
		if msg := page.text(t, "#group-form .form-error"); !strings.Contains(msg, "changed by someone else since you opened it") || !strings.Contains(msg, "Reload") {
			t.Errorf("conflict message = %q", msg)
		}
		var g groupState
		getJSON(t, gw, "/api/v1/nodegroups/gpu", &g)
		if g.MaxSize != 8 || g.TargetSize != 5 {
			t.Errorf("gpu after the refused edit = %+v, want max 8 (the other edit), target 5", g)
		}
		// Reload shows the current version.
		page.click(t, `#group-form [data-action="reload-editor"]`)
		page.waitFor(t, `document.querySelector('#group-form [name=maxSize]').value === '8' && document.querySelector('#group-form .form-error').hidden`, "the reloaded form")
		page.click(t, `#group-form [data-action="close-editor"]`)
	})

	t.Run("bounds saved, target refused", func(t *testing.T) {
		page.click(t, `button[data-action="edit-group"][data-id="gpu"]`)
		page.waitFor(t, `!document.getElementById('group-form').hidden && document.querySelector('#group-form [name=maxSize]').value === '8'`, "the gpu group form")
		page.set(t, "#group-form [name=maxSize]", "9")
		page.set(t, "#group-form [name=targetSize]", "20")
		page.click(t, "#group-form button[type=submit]")
		page.waitFor(t, `!document.querySelector('#group-form .form-error').hidden`, "the error")
		if msg := page.text(t, "#group-form .form-error"); !strings.Contains(msg, "Saved bounds 0..9, but the rest was not") || !strings.Contains(msg, "field: targetSize") {
			t.Errorf("partial save message = %q", msg)
		}
		var g groupState
		getJSON(t, gw, "/api/v1/nodegroups/gpu", &g)
		if g.MaxSize != 9 || g.TargetSize != 5 {
			t.Errorf("gpu = %+v, want max 9, target 5", g)
		}
		page.click(t, `#group-form [data-action="close-editor"]`)
	})

	t.Run("template", func(t *testing.T) {
		page.click(t, `button[data-action="edit-template"][data-id="small"]`)
		page.waitFor(t, `!document.getElementById('template-form').hidden && document.querySelector('#template-form [name=instanceType]').value === 'S5.MEDIUM4'`, "the template form")
		// An unknown account: the API's message and field show by the form.
		page.set(t, "#template-form [name=account]", "nope")
		page.click(t, "#template-form button[type=submit]")
		page.waitFor(t, `!document.querySelector('#template-form .form-error').hidden`, "the template error")
		if msg := page.text(t, "#template-form .form-error"); !strings.Contains(msg, `cloud account "nope" does not exist`) || !strings.Contains(msg, "field: account") {
			t.Errorf("template error = %q", msg)
		}
		page.screenshot(t, shots, "status-admin-template-error.png")
		var marked bool
		page.eval(t, `document.querySelector('#template-form [name=account]').classList.contains('invalid')`, &marked)
		if !marked {
			t.Error("the account input is not marked invalid")
		}
		page.set(t, "#template-form [name=account]", "team")
		page.set(t, "#template-form [name=instanceType]", "S5.LARGE8")
		page.set(t, "#template-form [name=hourlyPrice]", "0.4")
		page.click(t, "#template-form button[type=submit]")
		page.waitFor(t, `document.getElementById('notice').textContent.includes('Template small saved')`, "the template saved")
		var tpl struct {
			InstanceType  string  `json:"instanceType"`
			HourlyPrice   float64 `json:"hourlyPrice"`
			HasParameters bool    `json:"hasParameters"`
		}
		getJSON(t, gw, "/api/v1/templates/small", &tpl)
		if tpl.InstanceType != "S5.LARGE8" || tpl.HourlyPrice != 0.4 || !tpl.HasParameters {
			t.Errorf("template after the form = %+v", tpl)
		}
		// The parameters the form never showed are kept, following the
		// new instance type.
		stored := catalogEntry(t, gw, "templates.small").GetTemplate()
		var params map[string]any
		if err := json.Unmarshal([]byte(stored.GetParametersJson()), &params); err != nil || params["ImageId"] != "img-keep" || params["InstanceType"] != "S5.LARGE8" {
			t.Errorf("stored parameters = %s (%v)", stored.GetParametersJson(), err)
		}
	})

	t.Run("account", func(t *testing.T) {
		const secretID, secretKey = "AKIDwebuitest", "webui-secret-key-value"
		page.click(t, `button[data-action="edit-account"][data-id="team"]`)
		page.waitFor(t, `!document.getElementById('account-form').hidden && document.querySelector('#account-form [name=regions]').value === 'ap-shanghai'`, "the account form")
		page.set(t, "#account-form [name=regions]", "ap-shanghai, ap-beijing")
		page.set(t, "#account-form [name=secretId]", secretID)
		page.set(t, "#account-form [name=secretKey]", secretKey)
		page.click(t, "#account-form button[type=submit]")
		page.waitFor(t, `document.getElementById('notice').textContent.includes('Account team saved with new credentials')`, "the account saved")
		acct := catalogEntry(t, gw, "accounts.team").GetAccount()
		creds, err := key.OpenCredentials("team", acct.GetSealedCredentials(), acct.GetKeyId())
		if err != nil || creds.KeyID != secretID || creds.Secret != secretKey || strings.Join(acct.GetRegions(), ",") != "ap-shanghai,ap-beijing" {
			t.Fatalf("stored account: regions %v, credentials %v", acct.GetRegions(), err)
		}
		sealedBefore := acct.GetSealedCredentials()

		// Opened again, the form shows that credentials are stored, never
		// what they are; saving with empty secret fields keeps them.
		page.click(t, `button[data-action="edit-account"][data-id="team"]`)
		page.waitFor(t, `!document.getElementById('account-form').hidden && document.querySelector('#account-form [name=regions]').value === 'ap-shanghai, ap-beijing'`, "the account form again")
		var html string
		page.eval(t, `document.documentElement.outerHTML + [...document.querySelectorAll('input')].map((i) => i.value).join('|')`, &html)
		if strings.Contains(html, secretKey) || strings.Contains(html, secretID) {
			t.Fatal("the stored credentials reach the page")
		}
		if got := page.text(t, `#account-form [data-field="credentials"]`); !strings.Contains(got, "stored in the catalog") {
			t.Errorf("credentials note = %q", got)
		}
		page.screenshot(t, shots, "status-admin-account-form.png")
		page.set(t, "#account-form [name=regions]", "ap-beijing")
		page.click(t, "#account-form button[type=submit]")
		page.waitFor(t, `document.getElementById('notice').textContent === 'Account team saved.'`, "the account saved again")
		acct = catalogEntry(t, gw, "accounts.team").GetAccount()
		if string(acct.GetSealedCredentials()) != string(sealedBefore) || strings.Join(acct.GetRegions(), ",") != "ap-beijing" {
			t.Errorf("after a save with empty secret fields: regions %v, credentials kept %v", acct.GetRegions(), string(acct.GetSealedCredentials()) == string(sealedBefore))
		}
	})

	t.Run("retry", func(t *testing.T) {
		page.waitFor(t, `document.querySelector('button[data-action="retry"][data-id="i-gpu-1"]')`, "the retry button of the failed instance")
		if n := page.count(t, `button[data-action="retry"][data-id="i-gpu-2"]`); n != 0 {
			t.Error("a retry button on an instance with nothing to retry")
		}
		page.click(t, `button[data-action="retry"][data-id="i-gpu-1"]`)
		page.waitFor(t, `document.getElementById('notice').textContent.includes('Retry requested for instance i-gpu-1')`, "the retry notice")
		var in struct {
			CreationFailed bool            `json:"creationFailed"`
			LastError      json.RawMessage `json:"lastError"`
		}
		getJSON(t, gw, "/api/v1/instances/i-gpu-1", &in)
		if in.CreationFailed || in.LastError != nil {
			t.Errorf("i-gpu-1 after retry = %+v", in)
		}
		page.waitFor(t, `!document.querySelector('#errors tr[data-instance="i-gpu-1"]')`, "the error row to go")
	})

	t.Run("force delete", func(t *testing.T) {
		state := func() string {
			var in struct{ State string }
			getJSON(t, gw, "/api/v1/instances/i-gpu-2", &in)
			return in.State
		}
		// Cancelled: nothing happens.
		page.click(t, `button[data-action="force-delete"][data-id="i-gpu-2"]`)
		page.waitFor(t, `document.getElementById('confirm').open`, "the confirmation")
		text := page.text(t, "#confirm-text")
		if !strings.Contains(text, "i-gpu-2") || !strings.Contains(text, "ins-gpu2") {
			t.Errorf("confirmation = %q, want the instance and its cloud id", text)
		}
		page.screenshot(t, shots, "status-admin-force-delete.png")
		page.click(t, "#confirm-cancel")
		page.waitFor(t, `!document.getElementById('confirm').open`, "the confirmation to close")
		if s := state(); s != "RUNNING" {
			t.Fatalf("after cancel i-gpu-2 is %s", s)
		}
		// Confirmed.
		page.click(t, `button[data-action="force-delete"][data-id="i-gpu-2"]`)
		page.waitFor(t, `document.getElementById('confirm').open`, "the confirmation")
		page.click(t, "#confirm-ok")
		page.waitFor(t, `document.getElementById('notice').textContent.includes('Force delete of instance i-gpu-2 accepted')`, "the force-delete notice")
		if s := state(); s != "DELETING" {
			t.Errorf("after force delete i-gpu-2 is %s, want DELETING", s)
		}
		page.waitFor(t, `(() => { const r = document.querySelector('#instances tr[data-instance="i-gpu-2"]'); return r && r.cells[2].textContent === 'DELETING'; })()`, "the instance row in DELETING")
	})
	b.noExceptions(t)

	t.Run("read-only token", func(t *testing.T) {
		var before groupState
		getJSON(t, gw, "/api/v1/nodegroups/gpu", &before)
		ro := b.open("http://" + gw.addrs.REST + "/ui/#token=" + readOnlyToken)
		ro.waitFor(t, `document.body.dataset.state === 'loaded' && document.body.dataset.role === 'read-only'`, "the page to load read-only")
		ro.waitFor(t, `document.querySelector('tr[data-template="small"]')`, "the templates")
		if n := ro.count(t, `button[data-action^="edit-"], button[data-action="retry"], button[data-action="force-delete"], td.actions`); n != 0 {
			t.Errorf("%d write controls shown to a read-only token", n)
		}
		var hidden bool
		ro.eval(t, `[document.getElementById('editor'), document.getElementById('role'), ...document.querySelectorAll('th.admin, form.edit, form.edit button')].every((e) => e.getClientRects().length === 0)`, &hidden)
		if !hidden {
			t.Error("the editor or admin columns are shown to a read-only token")
		}
		// A write forged from the page with its token: refused.
		var forged struct {
			Status int    `json:"status"`
			Code   string `json:"code"`
		}
		ro.eval(t, `fetch('../api/v1/nodegroups/gpu/scale', {method: 'POST', credentials: 'omit',
			headers: {Authorization: 'Bearer ' + sessionStorage.getItem('nodesmith.token'), 'Content-Type': 'application/json'},
			body: JSON.stringify({targetSize: 0})}).then(async (r) => ({status: r.status, code: (await r.json()).code}))`, &forged)
		if forged.Status != http.StatusForbidden || forged.Code != "permission_denied" {
			t.Errorf("forged write = %+v, want 403 permission_denied", forged)
		}
		var after groupState
		getJSON(t, gw, "/api/v1/nodegroups/gpu", &after)
		if after != before {
			t.Errorf("gpu changed by the forged write: %+v -> %+v", before, after)
		}
	})
	b.noExceptions(t)
}

// catalogEntry reads a catalog record as lifecycle stored it.
func catalogEntry(t *testing.T, gw *gateway, key string) *statev1.CatalogEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := gw.env.JS.KeyValue(ctx, messaging.BucketCatalog)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatalf("catalog %s: %v", key, err)
	}
	out := &statev1.CatalogEntry{}
	if err := proto.Unmarshal(e.Value(), out); err != nil {
		t.Fatal(err)
	}
	return out
}
