package rest_test

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/metrics/metricstest"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/libs/providerid"

	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/natsreq"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/rest"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/stateconv"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/ports"
)

const (
	adminToken    = "admin-token-0123456789"
	readOnlyToken = "reader-token-0123456789"
)

type fixture struct {
	rm  *app.ReadModel
	lc  *natsreq.Fake
	h   http.Handler
	rev uint64
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	return newFixtureWith(t, nil)
}

// newFixtureWith is newFixture with options set by mutate.
func newFixtureWith(t testing.TB, mutate func(*rest.Options)) *fixture {
	t.Helper()
	f := &fixture{rm: app.NewReadModel(), lc: &natsreq.Fake{}}
	svc := app.NewService(f.rm, f.lc, app.Config{OpTimeout: 2 * time.Second, GPULabel: "gpu"}, nil)
	auth, err := rest.NewAuthenticator(rest.TokenConfig{AdminTokens: []string{adminToken}, ReadOnlyTokens: []string{readOnlyToken}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := rest.Options{MaxBodyBytes: 1024}
	if mutate != nil {
		mutate(&o)
	}
	f.h = rest.NewHandler(svc, auth, o)
	return f
}

func (f *fixture) sync() {
	f.rm.MarkSynced(app.BucketGroups, nil)
	f.rm.MarkSynced(app.BucketInstances, nil)
	f.rm.MarkSynced(app.BucketCatalog, nil)
}

func (f *fixture) seed() {
	f.rev++
	f.rm.PutGroup("web", f.rev, &domain.NodeGroup{
		ID: "web", MinSize: 1, MaxSize: 10, TargetSize: 2,
		Hooks:            &domain.Hooks{AfterCreated: &domain.HookSpec{Name: "join", Script: "kubeadm join --token s3cr3t-join-token", Env: map[string]string{"SECRET": "hunter2"}}},
		InstanceTemplate: &domain.InstanceTemplate{Name: "tpl", Provider: "tencentcloud", Account: "prod", Region: "ap-guangzhou", ParametersJSON: `{"LoginSettings":{"Password":"p4ssw0rd"}}`, HookEnv: map[string]string{"JOIN": "hunter2"}, ProviderIDTemplate: "tencentcloud:///{{.Region}}/{{.CloudID}}"},
	})
	for _, id := range []string{"i-1", "i-2", "i-3"} {
		f.rev++
		f.rm.PutInstance("web."+id, f.rev, &domain.Instance{
			ID: id, Group: "web", State: domain.StateRunning, ProviderID: providerid.Placeholder("web", id),
			CreationFailed: id == "i-3", HookOutputTail: "joined " + id,
			History: []domain.Transition{domain.NewTransition(domain.StatePending, domain.StateCreating, "dispatched", time.Now())},
		})
	}
	f.sync()
}

// applyGroupUpdate answers lifecycle requests by writing target into the
// group, as the KV watch would deliver it.
func (f *fixture) answerSetTarget() {
	f.lc.HandleWire = func(_ context.Context, req *lifecyclev1.Request) (ports.Revisions, error) {
		switch op := req.GetOp().(type) {
		case *lifecyclev1.Request_SetTargetSize:
			g, _ := f.rm.Group(op.SetTargetSize.GetGroup())
			upd := *g.Record
			upd.TargetSize = op.SetTargetSize.GetTargetSize()
			f.rev++
			f.rm.PutGroup(upd.ID, f.rev, &upd)
			return ports.Revisions{Groups: f.rev}, nil
		case *lifecyclev1.Request_PutGroup:
			f.rev++
			f.rm.PutGroup(op.PutGroup.GetGroup().GetId(), f.rev, stateconv.Group(op.PutGroup.GetGroup()))
			return ports.Revisions{Groups: f.rev}, nil
		case *lifecyclev1.Request_DeleteGroup:
			f.rev++
			f.rm.DeleteGroup(op.DeleteGroup.GetId(), f.rev)
			return ports.Revisions{Groups: f.rev}, nil
		case *lifecyclev1.Request_InstanceAction:
			v, _ := f.rm.Instance(op.InstanceAction.GetInstanceId())
			upd := *v.Record
			if op.InstanceAction.GetAction() == lifecyclev1.InstanceAction_ACTION_FORCE_DELETE {
				upd.State = domain.StateDeleting
			}
			upd.CreationFailed = false
			f.rev++
			f.rm.PutInstance(v.Key, f.rev, &upd)
			return ports.Revisions{Instances: f.rev}, nil
		case *lifecyclev1.Request_ReleaseOrphans:
			return ports.Revisions{}, nil // writes no state
		}
		return ports.Revisions{}, domain.Errorf(contract.CodeUnimplemented, "unexpected")
	}
}

// answerCatalog makes the fake lifecycle store catalog entries in the read
// model, on top of answerSetTarget.
func (f *fixture) answerCatalog() {
	groupOps := f.lc.HandleWire
	f.lc.HandleWire = func(ctx context.Context, req *lifecyclev1.Request) (ports.Revisions, error) {
		switch op := req.GetOp().(type) {
		case *lifecyclev1.Request_PutCatalogEntry:
			e := stateconv.CatalogEntry(op.PutCatalogEntry.GetEntry())
			e.Source = "api"
			var key string
			switch {
			case e.Template != nil:
				key = app.CatalogKey(app.KindTemplates, e.Template.Name)
			case e.Account != nil:
				key = app.CatalogKey(app.KindAccounts, e.Account.Name)
			case e.Hook != nil:
				key = app.CatalogKey(app.KindHooks, e.Hook.Name)
			}
			f.rev++
			f.rm.PutCatalog(key, f.rev, e)
			return ports.Revisions{Catalog: f.rev}, nil
		case *lifecyclev1.Request_DeleteCatalogEntry:
			d := op.DeleteCatalogEntry
			for _, g := range f.rm.Groups() {
				if d.GetKind() == lifecyclev1.CatalogKind_CATALOG_KIND_TEMPLATE && g.Record.Template() != nil && g.Record.InstanceTemplate.Name == d.GetName() {
					return ports.Revisions{}, domain.Errorf(contract.CodeFailedPrecondition, "instance template %q is used by node groups %s", d.GetName(), g.Record.ID)
				}
			}
			prefix := map[lifecyclev1.CatalogKind]string{1: app.KindTemplates, 2: app.KindAccounts, 3: app.KindHooks}[d.GetKind()]
			f.rev++
			f.rm.DeleteCatalog(app.CatalogKey(prefix, d.GetName()), f.rev)
			return ports.Revisions{Catalog: f.rev}, nil
		}
		if groupOps == nil {
			return ports.Revisions{}, nil
		}
		return groupOps(ctx, req)
	}
}

type call struct {
	method, path, token, body, contentType string
	header                                 map[string]string
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (f *fixture) do(t testing.TB, c call) response {
	t.Helper()
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req := httptest.NewRequest(c.method, c.path, body)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.contentType != "" {
		req.Header.Set("Content-Type", c.contentType)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

func errorBody(t testing.TB, r response) rest.ErrorBody {
	t.Helper()
	var e rest.ErrorBody
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body is not JSON: %v: %s", err, r.body)
	}
	if e.Code == "" || e.Message == "" || e.Details == nil {
		t.Fatalf("error body lacks code, message or details: %s", r.body)
	}
	return e
}

func TestAuthAndErrors(t *testing.T) {
	f := newFixture(t)
	f.seed()
	f.answerSetTarget()
	big := `{"targetSize": 3, "pad": "` + strings.Repeat("x", 2000) + `"}`
	tests := []struct {
		name   string
		call   call
		status int
		code   string // error code; empty for success
	}{
		{"anonymous", call{method: "GET", path: "/api/v1/nodegroups"}, 401, "unauthenticated"},
		{"anonymous write", call{method: "POST", path: "/api/v1/nodegroups/web/scale", body: `{"targetSize":3}`}, 401, "unauthenticated"},
		{"anonymous unknown route", call{method: "GET", path: "/api/v1/secret-route"}, 401, "unauthenticated"},
		{"wrong token", call{method: "GET", path: "/api/v1/nodegroups", token: "not-a-real-token-at-all"}, 401, "unauthenticated"},
		{"basic auth scheme", call{method: "GET", path: "/api/v1/nodegroups", header: map[string]string{"Authorization": "Basic " + adminToken}}, 401, "unauthenticated"},
		{"token prefix", call{method: "GET", path: "/api/v1/nodegroups", token: adminToken[:10]}, 401, "unauthenticated"},
		{"read-only reads", call{method: "GET", path: "/api/v1/nodegroups", token: readOnlyToken}, 200, ""},
		{"read-only writes", call{method: "POST", path: "/api/v1/nodegroups/web/scale", token: readOnlyToken, body: `{"targetSize":3}`}, 403, "permission_denied"},
		{"read-only deletes", call{method: "DELETE", path: "/api/v1/instances/i-1", token: readOnlyToken}, 403, "permission_denied"},
		{"admin reads", call{method: "GET", path: "/api/v1/status", token: adminToken}, 200, ""},
		{"unknown group", call{method: "GET", path: "/api/v1/nodegroups/nope", token: readOnlyToken}, 404, "not_found"},
		{"unknown instance", call{method: "GET", path: "/api/v1/instances/nope", token: readOnlyToken}, 404, "not_found"},
		{"unknown route", call{method: "GET", path: "/api/v1/nothing", token: readOnlyToken}, 404, "not_found"},
		{"method not allowed", call{method: "PUT", path: "/api/v1/status", token: adminToken}, 405, "unimplemented"},
		{"scale: empty body", call{method: "POST", path: "/api/v1/nodegroups/web/scale", token: adminToken}, 400, "invalid_argument"},
		{"scale: malformed", call{method: "POST", path: "/api/v1/nodegroups/web/scale", token: adminToken, body: `{"targetSize":`}, 400, "invalid_argument"},
		{"scale: wrong type", call{method: "POST", path: "/api/v1/nodegroups/web/scale", token: adminToken, body: `{"targetSize":"3"}`}, 400, "invalid_argument"},
		{"scale: unknown field", call{method: "POST", path: "/api/v1/nodegroups/web/scale", token: adminToken, body: `{"targetSize":3,"force":true}`}, 400, "invalid_argument"},
		{"scale: missing field", call{method: "POST", path: "/api/v1/nodegroups/web/scale", token: adminToken, body: `{}`}, 400, "invalid_argument"},
		{"scale: negative", call{method: "POST", path: "/api/v1/nodegroups/web/scale", token: adminToken, body: `{"targetSize":-1}`}, 400, "invalid_argument"},
		{"scale: over max", call{method: "POST", path: "/api/v1/nodegroups/web/scale", token: adminToken, body: `{"targetSize":11}`}, 400, "invalid_argument"},
		{"scale: two objects", call{method: "POST", path: "/api/v1/nodegroups/web/scale", token: adminToken, body: `{"targetSize":3}{}`}, 400, "invalid_argument"},
		{"scale: too large", call{method: "POST", path: "/api/v1/nodegroups/web/scale", token: adminToken, body: big}, 413, "invalid_argument"},
		{"scale: not JSON", call{method: "POST", path: "/api/v1/nodegroups/web/scale", token: adminToken, body: `targetSize=3`, contentType: "application/x-www-form-urlencoded"}, 415, "invalid_argument"},
		{"scale: unknown group", call{method: "POST", path: "/api/v1/nodegroups/nope/scale", token: adminToken, body: `{"targetSize":3}`}, 404, "not_found"},
		{"scale", call{method: "POST", path: "/api/v1/nodegroups/web/scale", token: adminToken, body: `{"targetSize":4}`, contentType: "application/json; charset=utf-8"}, 200, ""},
		{"list: bad limit", call{method: "GET", path: "/api/v1/instances?limit=0", token: readOnlyToken}, 400, "invalid_argument"},
		{"list: huge limit", call{method: "GET", path: "/api/v1/instances?limit=100000", token: readOnlyToken}, 400, "invalid_argument"},
		{"list: bad state", call{method: "GET", path: "/api/v1/instances?state=SLEEPING", token: readOnlyToken}, 400, "invalid_argument"},
		{"list: bad continue", call{method: "GET", path: "/api/v1/instances?continue=%25%25", token: readOnlyToken}, 400, "invalid_argument"},
		{"list: several states", call{method: "GET", path: "/api/v1/instances?state=running,PENDING&state=DELETED", token: readOnlyToken}, 200, ""},
		{"list: one bad state of several", call{method: "GET", path: "/api/v1/instances?state=RUNNING,SLEEPING", token: readOnlyToken}, 400, "invalid_argument"},
		{"templates", call{method: "GET", path: "/api/v1/templates", token: readOnlyToken}, 200, ""},
		{"template", call{method: "GET", path: "/api/v1/templates/tpl", token: readOnlyToken}, 200, ""},
		{"unknown template", call{method: "GET", path: "/api/v1/templates/nope", token: readOnlyToken}, 404, "not_found"},
		{"templates: anonymous", call{method: "GET", path: "/api/v1/templates"}, 401, "unauthenticated"},
		{"templates: write", call{method: "POST", path: "/api/v1/templates", token: adminToken, body: `{}`}, 405, "unimplemented"},
		{"accounts", call{method: "GET", path: "/api/v1/accounts", token: readOnlyToken}, 200, ""},
		{"account", call{method: "GET", path: "/api/v1/accounts/prod", token: readOnlyToken}, 200, ""},
		{"unknown account", call{method: "GET", path: "/api/v1/accounts/nope", token: readOnlyToken}, 404, "not_found"},
		{"accounts: unknown field", call{method: "PUT", path: "/api/v1/accounts/prod", token: adminToken, body: `{"secretKey":"x"}`}, 400, "invalid_argument"},
		{"hooks", call{method: "GET", path: "/api/v1/hooks", token: readOnlyToken}, 200, ""},
		{"transitions", call{method: "GET", path: "/api/v1/transitions?group=web&limit=5", token: readOnlyToken}, 200, ""},
		{"transitions: bad limit", call{method: "GET", path: "/api/v1/transitions?limit=0", token: readOnlyToken}, 400, "invalid_argument"},
		{"transitions: huge limit", call{method: "GET", path: "/api/v1/transitions?limit=1001", token: readOnlyToken}, 400, "invalid_argument"},
		{"retry", call{method: "POST", path: "/api/v1/instances/i-3/retry", token: adminToken}, 200, ""},
		{"force delete", call{method: "DELETE", path: "/api/v1/instances/i-2", token: adminToken}, 202, ""},
		{"release orphans: read-only", call{method: "POST", path: "/api/v1/reconciler/release-orphans", token: readOnlyToken}, 403, "permission_denied"},
		{"release orphans: anonymous", call{method: "POST", path: "/api/v1/reconciler/release-orphans"}, 401, "unauthenticated"},
		{"release orphans", call{method: "POST", path: "/api/v1/reconciler/release-orphans", token: adminToken}, 202, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.do(t, tt.call)
			if r.status != tt.status {
				t.Fatalf("status = %d, want %d: %s", r.status, tt.status, r.body)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			if tt.code != "" {
				if e := errorBody(t, r); e.Code != tt.code {
					t.Errorf("code = %q, want %q (%s)", e.Code, tt.code, e.Message)
				}
			}
			if tt.status == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	if g, _ := f.rm.Group("web"); g.Record.TargetSize != 4 {
		t.Errorf("scale did not reach lifecycle: target %d", g.Record.TargetSize)
	}
	var actions []string
	for _, c := range f.lc.WireCalls() {
		if a := c.GetInstanceAction(); a != nil {
			actions = append(actions, a.GetInstanceId()+":"+a.GetAction().String())
		}
	}
	if !slices.Equal(actions, []string{"i-3:ACTION_RETRY", "i-2:ACTION_FORCE_DELETE"}) {
		t.Errorf("instance actions sent = %v", actions)
	}
	releases := 0
	for _, c := range f.lc.WireCalls() {
		if c.GetReleaseOrphans() != nil {
			releases++
		}
	}
	if releases != 1 {
		t.Errorf("orphan releases sent = %d, want 1 (the admin's)", releases)
	}
}

func TestLifecycleErrorsMapToHTTP(t *testing.T) {
	f := newFixture(t)
	f.seed()
	tests := []struct {
		err    error
		status int
		code   string
	}{
		{domain.Errorf(contract.CodeFailedPrecondition, "instance has nothing to retry"), 409, "failed_precondition"},
		{domain.Errorf(contract.CodeUnavailable, "no lifecycle leader"), 503, "unavailable"},
		{domain.Errorf(contract.CodeDeadlineExceeded, "outcome unknown"), 504, "deadline_exceeded"},
		{domain.Errorf(contract.CodeResourceExhausted, "slow down"), 429, "resource_exhausted"},
	}
	for _, tt := range tests {
		f.lc.FailNext(tt.err)
		r := f.do(t, call{method: "POST", path: "/api/v1/instances/i-1/retry", token: adminToken})
		if r.status != tt.status {
			t.Errorf("%v: status %d, want %d", tt.err, r.status, tt.status)
			continue
		}
		if e := errorBody(t, r); e.Code != tt.code || e.Message != domain.MessageOf(tt.err) {
			t.Errorf("%v: body %+v", tt.err, e)
		}
	}
}

func TestUnsyncedIsUnavailable(t *testing.T) {
	f := newFixture(t)
	r := f.do(t, call{method: "GET", path: "/api/v1/nodegroups", token: readOnlyToken})
	if r.status != 503 || errorBody(t, r).Code != "unavailable" {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	// The status page still answers, and says so.
	r = f.do(t, call{method: "GET", path: "/api/v1/status", token: readOnlyToken})
	var st rest.StatusView
	if r.status != 200 || json.Unmarshal(r.body, &st) != nil || st.Synced {
		t.Fatalf("status before sync: %d %s", r.status, r.body)
	}
}

func TestGroupViewRedactsSecretsAndHasETag(t *testing.T) {
	f := newFixture(t)
	f.seed()
	r := f.do(t, call{method: "GET", path: "/api/v1/nodegroups/web", token: readOnlyToken})
	if r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	for _, secret := range []string{"s3cr3t-join-token", "hunter2", "p4ssw0rd", "kubeadm"} {
		if strings.Contains(string(r.body), secret) {
			t.Errorf("group view leaks %q: %s", secret, r.body)
		}
	}
	var g rest.Group
	if err := json.Unmarshal(r.body, &g); err != nil {
		t.Fatal(err)
	}
	if !g.Hooks["afterCreated"].HasScript || g.Instances["RUNNING"] != 3 || g.TargetSize != 2 {
		t.Errorf("group view: %+v", g)
	}
	tag := r.header.Get("ETag")
	if tag != `"1"` {
		t.Fatalf("ETag = %q, want the group's KV revision", tag)
	}
	r = f.do(t, call{method: "GET", path: "/api/v1/nodegroups/web", token: readOnlyToken, header: map[string]string{"If-None-Match": tag}})
	if r.status != http.StatusNotModified {
		t.Fatalf("If-None-Match current: %d", r.status)
	}
}

// Templates, accounts and hooks are shown without their secrets.
func TestCatalogViews(t *testing.T) {
	f := newFixture(t)
	f.seed()
	get := func(path string, v any) {
		t.Helper()
		r := f.do(t, call{method: "GET", path: path, token: readOnlyToken})
		if r.status != 200 {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		for _, secret := range []string{"s3cr3t-join-token", "hunter2", "p4ssw0rd", "kubeadm", "LoginSettings", "{{.CloudID}}"} {
			if strings.Contains(string(r.body), secret) {
				t.Errorf("GET %s leaks %q: %s", path, secret, r.body)
			}
		}
		if err := json.Unmarshal(r.body, v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	var tpls rest.TemplateList
	get("/api/v1/templates", &tpls)
	if len(tpls.Items) != 1 || tpls.Items[0].Name != "tpl" || tpls.Items[0].Account != "prod" || !tpls.Items[0].HasParameters ||
		!slices.Equal(tpls.Items[0].Groups, []string{"web"}) {
		t.Errorf("templates = %+v", tpls.Items)
	}
	var accts rest.AccountList
	get("/api/v1/accounts", &accts)
	if len(accts.Items) != 1 || accts.Items[0].Name != "prod" || !slices.Equal(accts.Items[0].Regions, []string{"ap-guangzhou"}) {
		t.Errorf("accounts = %+v", accts.Items)
	}
	var acct rest.Account
	get("/api/v1/accounts/prod", &acct)
	if acct.Provider != "tencentcloud" || !slices.Equal(acct.Templates, []string{"tpl"}) {
		t.Errorf("account = %+v", acct)
	}
	var hooks rest.HookList
	get("/api/v1/hooks", &hooks)
	if len(hooks.Items) != 1 || hooks.Items[0].Name != "join" || hooks.Items[0].Phase != "afterCreated" || !hooks.Items[0].HasScript {
		t.Errorf("hooks = %+v", hooks.Items)
	}
	var trs rest.TransitionList
	get("/api/v1/transitions?limit=2", &trs)
	if len(trs.Items) != 2 || trs.Items[0].Group != "web" || trs.Items[0].To != "CREATING" || trs.Items[0].Reason != "dispatched" {
		t.Errorf("transitions = %+v", trs.Items)
	}
}

func TestInstanceDetailAndPagination(t *testing.T) {
	f := newFixture(t)
	f.seed()
	r := f.do(t, call{method: "GET", path: "/api/v1/instances/i-1", token: adminToken})
	var in rest.Instance
	if r.status != 200 || json.Unmarshal(r.body, &in) != nil {
		t.Fatalf("detail: %d %s", r.status, r.body)
	}
	if len(in.History) != 1 || in.History[0].Reason != "dispatched" || in.HookOutputTail == nil || *in.HookOutputTail != "joined i-1" {
		t.Errorf("detail lacks history or hook output: %s", r.body)
	}

	var ids []string
	path := "/api/v1/instances?group=web&limit=2"
	for range 5 {
		r := f.do(t, call{method: "GET", path: path, token: readOnlyToken})
		var page rest.InstanceList
		if r.status != 200 || json.Unmarshal(r.body, &page) != nil {
			t.Fatalf("list: %d %s", r.status, r.body)
		}
		for _, it := range page.Items {
			ids = append(ids, it.ID)
			if it.History != nil || it.HookOutputTail != nil {
				t.Errorf("list items carry detail fields: %+v", it)
			}
		}
		if page.Continue == "" {
			break
		}
		path = "/api/v1/instances?group=web&limit=2&continue=" + page.Continue
	}
	if !slices.Equal(ids, []string{"i-1", "i-2", "i-3"}) {
		t.Fatalf("paged ids = %v", ids)
	}
}

// The list and the detail say where each VM was created (issue 16's zone,
// instance type and capacity type); an instance created before that was
// recorded has none of the keys.
func TestInstanceViewsShowWhereTheVMWasCreated(t *testing.T) {
	f := newFixture(t)
	f.seed() // i-1..i-3: no placement recorded
	f.rev++
	f.rm.PutInstance("web.i-4", f.rev, &domain.Instance{
		ID: "i-4", Group: "web", State: domain.StateRunning, ProviderID: "tencentcloud:///ap-guangzhou-4/ins-4",
		Zone: "ap-guangzhou-4", InstanceType: "SA5.MEDIUM4", CapacityType: "spot",
	})
	want := map[string]string{"zone": "ap-guangzhou-4", "instanceType": "SA5.MEDIUM4", "capacityType": "spot"}
	placement := func(raw json.RawMessage) map[string]string {
		t.Helper()
		var keys map[string]any
		if err := json.Unmarshal(raw, &keys); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for k := range want {
			if v, ok := keys[k]; ok {
				out[k], _ = v.(string)
			}
		}
		return out
	}

	r := f.do(t, call{method: "GET", path: "/api/v1/instances?group=web", token: readOnlyToken})
	var page struct {
		Items []json.RawMessage `json:"items"`
	}
	if r.status != 200 || json.Unmarshal(r.body, &page) != nil || len(page.Items) != 4 {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	if got := placement(page.Items[3]); !maps.Equal(got, want) {
		t.Errorf("listed i-4 placement = %v, want %v", got, want)
	}
	if got := placement(page.Items[0]); len(got) != 0 {
		t.Errorf("listed i-1 (none recorded) placement = %v, want no keys", got)
	}

	r = f.do(t, call{method: "GET", path: "/api/v1/instances/i-4", token: readOnlyToken})
	if r.status != 200 {
		t.Fatalf("detail: %d %s", r.status, r.body)
	}
	if got := placement(r.body); !maps.Equal(got, want) {
		t.Errorf("detail placement = %v, want %v", got, want)
	}
}

func TestTokenFilesReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "admin")
	write := func(content string, mod time.Time) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	old, rotated := "first-token-0123456789", "second-token-0123456789"
	write("# admin tokens\n\n"+old+"\n", time.Now().Add(-time.Hour))
	a, err := rest.NewAuthenticator(rest.TokenConfig{AdminTokenFile: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Authenticate(old) != rest.RoleAdmin || a.Authenticate(rotated) != rest.RoleNone {
		t.Fatal("initial tokens")
	}
	write(rotated+"\n", time.Now())
	// Files are re-checked at most once a second: poll.
	for deadline := time.Now().Add(10 * time.Second); a.Authenticate(rotated) != rest.RoleAdmin; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("rotated token never accepted")
		}
	}
	if a.Authenticate(old) != rest.RoleNone {
		t.Error("old token still accepted after rotation")
	}

	if _, err := rest.NewAuthenticator(rest.TokenConfig{AdminTokens: []string{"short"}}, nil); err == nil {
		t.Error("short token accepted")
	}
	if _, err := rest.NewAuthenticator(rest.TokenConfig{ReadOnlyTokenFile: filepath.Join(dir, "missing")}, nil); err == nil {
		t.Error("missing token file accepted")
	}
	if err := os.WriteFile(filepath.Join(dir, "weak"), []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = rest.NewAuthenticator(rest.TokenConfig{ReadOnlyTokenFile: filepath.Join(dir, "weak")}, nil)
	if err == nil || strings.Contains(err.Error(), "abc") {
		t.Errorf("weak token file: %v (must fail without echoing the token)", err)
	}
}

// The OpenAPI document lists exactly the routes the router serves.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	f := newFixture(t)
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(rest.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	var documented, served []string
	for p, ops := range doc.Paths {
		for m := range ops {
			documented = append(documented, strings.ToUpper(m)+" "+p)
		}
	}
	for _, r := range rest.Routes(f.h) {
		served = append(served, r.Method+" "+r.Pattern)
	}
	slices.Sort(documented)
	slices.Sort(served)
	if !slices.Equal(documented, served) {
		t.Fatalf("OpenAPI and router disagree:\ndocumented %v\nserved     %v", documented, served)
	}
	r := f.do(t, call{method: "GET", path: "/api/v1/openapi.json", token: readOnlyToken})
	if r.status != 200 || string(r.body) != string(rest.OpenAPI) {
		t.Fatalf("served document differs: %d", r.status)
	}
}

// The stored tail of a hook's output is for admin tokens only: read-only
// tokens get the instance detail without the field.
func TestHookOutputOnlyForAdmins(t *testing.T) {
	f := newFixture(t)
	f.seed()
	for _, tc := range []struct {
		token string
		want  bool
	}{{adminToken, true}, {readOnlyToken, false}} {
		r := f.do(t, call{method: "GET", path: "/api/v1/instances/i-1", token: tc.token})
		if r.status != 200 {
			t.Fatalf("detail: %d %s", r.status, r.body)
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(r.body, &raw); err != nil {
			t.Fatal(err)
		}
		_, has := raw["hookOutputTail"]
		if has != tc.want || strings.Contains(string(r.body), "joined i-1") != tc.want {
			t.Errorf("token %s: hookOutputTail present=%v, want %v: %s", tc.token[:6], has, tc.want, r.body)
		}
		if _, ok := raw["history"]; !ok {
			t.Errorf("token %s: the history is missing: %s", tc.token[:6], r.body)
		}
		if v := r.header.Get("Vary"); v != "Authorization" {
			t.Errorf("Vary = %q, want Authorization (the body depends on the token)", v)
		}
	}
}

// Each token has its own bucket: past the burst a token gets 429 with
// Retry-After and the API's JSON error, counted in the metric, while other
// tokens still pass; the bucket refills at the configured rate.
func TestRateLimitPerToken(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFixture(t)
	svc := app.NewService(f.rm, f.lc, app.Config{OpTimeout: 2 * time.Second, GPULabel: "gpu"}, nil)
	auth, err := rest.NewAuthenticator(rest.TokenConfig{AdminTokens: []string{adminToken}, ReadOnlyTokens: []string{readOnlyToken}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 2/s: one request back every 500ms, far longer than four requests
	// take even under -race on a busy machine.
	f.h = rest.NewHandler(svc, auth, rest.Options{Registry: reg, RateLimit: 2, RateBurst: 3})
	f.seed()
	get := func(token string) response {
		return f.do(t, call{method: "GET", path: "/api/v1/status", token: token})
	}
	for i := range 3 {
		if r := get(readOnlyToken); r.status != 200 {
			t.Fatalf("request %d within the burst: %d %s", i+1, r.status, r.body)
		}
	}
	r := get(readOnlyToken)
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("past the burst: %d %s", r.status, r.body)
	}
	if ra := r.header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After = %q, want 1 (whole seconds, rounded up)", ra)
	}
	e := errorBody(t, r)
	if e.Code != "resource_exhausted" || e.Details["retryAfterSeconds"] != float64(1) || e.Details["burst"] != float64(3) {
		t.Errorf("429 body: %s", r.body)
	}
	// Another token is not affected.
	if r := get(adminToken); r.status != 200 {
		t.Errorf("admin token limited by the read-only token's requests: %d", r.status)
	}
	// Unauthenticated requests are answered 401, never 429, and take
	// nothing from any bucket.
	for range 5 {
		if r := get("not-a-valid-token-0123456789"); r.status != http.StatusUnauthorized {
			t.Fatalf("unknown token: %d", r.status)
		}
	}
	if got := metricstest.Value(t, reg, "nodesmith_gateway_rest_rate_limited_total", map[string]string{"role": "read-only"}); got != 1 {
		t.Errorf("rate-limited counter = %v, want 1", got)
	}
	// The bucket refills.
	time.Sleep(600 * time.Millisecond)
	if r := get(readOnlyToken); r.status != 200 {
		t.Errorf("after refilling: %d %s", r.status, r.body)
	}
}
