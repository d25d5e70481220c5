package rest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/libs/sealed"
)

// PATCH /templates/{name} changes what a reader sees and keeps what it
// cannot see: parameters, providerID template, hook environment and
// secret parameters survive a patch that does not name them, and a zone or
// instance type change is carried into the parameters.
func TestPatchTemplateKeepsWriteOnlyFields(t *testing.T) {
	key := testKey(t)
	f, _ := newCatalogFixture(t, key)
	admin := func(method, path, body, ifMatch string) response {
		t.Helper()
		c := call{method: method, path: path, token: adminToken, body: body}
		if ifMatch != "" {
			c.header = map[string]string{"If-Match": ifMatch}
		}
		return f.do(t, c)
	}
	if r := admin("PUT", "/api/v1/accounts/team", `{"regions":["ap-shanghai"]}`, ""); r.status != http.StatusCreated {
		t.Fatalf("account: %d %s", r.status, r.body)
	}
	r := admin("PUT", "/api/v1/templates/big", `{"account":"team","zone":"ap-shanghai-2","instanceType":"S5.LARGE8",
		"parameters":{"ImageId":"img-1","Placement":{"Zone":"ap-shanghai-2","ProjectId":7}},
		"providerIDTemplate":"tencentcloud:///{{.Region}}/{{.CloudID}}","hookEnv":{"TOKEN":"hook-s3cr3t"},
		"secretParameters":{"LoginSettings":{"Password":"p4ssw0rd"}}}`, "")
	if r.status != http.StatusCreated {
		t.Fatalf("create template: %d %s", r.status, r.body)
	}
	tag := r.header.Get("ETag")

	r = admin("PATCH", "/api/v1/templates/big", `{"zone":"ap-shanghai-4","instanceType":"S5.MEDIUM4","hourlyPrice":0.25}`, tag)
	if r.status != http.StatusOK || r.header.Get("ETag") == tag {
		t.Fatalf("patch: %d %v %s", r.status, r.header, r.body)
	}
	if strings.Contains(string(r.body), "p4ssw0rd") || strings.Contains(string(r.body), "hook-s3cr3t") {
		t.Fatalf("write-only fields returned: %s", r.body)
	}
	sent := lastCatalogPut(t, f)
	tpl := sent.GetEntry().GetTemplate()
	if sent.GetExpectedRevision() == 0 || tpl.GetZone() != "ap-shanghai-4" || tpl.GetInstanceType() != "S5.MEDIUM4" || tpl.GetHourlyPrice() != 0.25 ||
		tpl.GetProviderIdTemplate() != "tencentcloud:///{{.Region}}/{{.CloudID}}" {
		t.Fatalf("PutCatalogEntry sent: %v", sent)
	}
	var params map[string]any
	if err := json.Unmarshal([]byte(tpl.GetParametersJson()), &params); err != nil {
		t.Fatal(err)
	}
	placement, _ := params["Placement"].(map[string]any)
	if params["ImageId"] != "img-1" || params["InstanceType"] != "S5.MEDIUM4" || placement["Zone"] != "ap-shanghai-4" || placement["ProjectId"] != float64(7) {
		t.Errorf("parameters = %s", tpl.GetParametersJson())
	}
	// The sealed values are kept as they were (tokens), not sealed again
	// or dropped.
	env, err := key.OpenMap(sealed.PurposeHookEnv, tpl.GetHookEnv())
	if err != nil || env["TOKEN"] != "hook-s3cr3t" {
		t.Errorf("hook env after patch = %v, %v", env, err)
	}
	if p := tpl.GetSecretParameters()["LoginSettings"]; !sealed.IsToken(p) {
		t.Errorf("secret parameter after patch = %q, want a sealed token", p)
	}

	// The ETag the patch was made at is stale now.
	if r := admin("PATCH", "/api/v1/templates/big", `{"hourlyPrice":1}`, tag); r.status != http.StatusPreconditionFailed {
		t.Errorf("stale If-Match: %d %s", r.status, r.body)
	}
	// Bad input names the field.
	r = admin("PATCH", "/api/v1/templates/big", `{"hourlyPrice":-1}`, "")
	if r.status != http.StatusBadRequest || errorBody(t, r).Details["field"] != "hourlyPrice" {
		t.Errorf("negative price: %d %s", r.status, r.body)
	}
	r = admin("PATCH", "/api/v1/templates/big", `{"colour":"red"}`, "")
	if r.status != http.StatusBadRequest || errorBody(t, r).Details["field"] != "colour" {
		t.Errorf("unknown field: %d %s", r.status, r.body)
	}
	if r := admin("PATCH", "/api/v1/templates/nope", `{"hourlyPrice":1}`, ""); r.status != http.StatusNotFound {
		t.Errorf("missing template: %d %s", r.status, r.body)
	}
	// Read-only tokens may not patch.
	if r := f.do(t, call{method: "PATCH", path: "/api/v1/templates/big", token: readOnlyToken, body: `{"hourlyPrice":1}`}); r.status != http.StatusForbidden {
		t.Errorf("read-only patch: %d %s", r.status, r.body)
	}
}

// POST /scale with If-Match is refused with 412 once the group changed
// since the client read it, and applied while it is current.
func TestScaleIfMatch(t *testing.T) {
	f := newFixture(t)
	f.seed()
	f.answerSetTarget()
	cur := f.do(t, call{method: "GET", path: "/api/v1/nodegroups/web", token: adminToken})
	tag := cur.header.Get("ETag")
	if cur.status != http.StatusOK || tag == "" {
		t.Fatalf("get: %d %v", cur.status, cur.header)
	}
	stale := `"` + "1" + `"`
	if tag == stale {
		stale = `"2"`
	}
	r := f.do(t, call{method: "POST", path: "/api/v1/nodegroups/web/scale", token: adminToken, body: `{"targetSize":4}`, header: map[string]string{"If-Match": stale}})
	if r.status != http.StatusPreconditionFailed || errorBody(t, r).Code != "aborted" {
		t.Fatalf("stale If-Match: %d %s", r.status, r.body)
	}
	r = f.do(t, call{method: "POST", path: "/api/v1/nodegroups/web/scale", token: adminToken, body: `{"targetSize":4}`, header: map[string]string{"If-Match": tag}})
	if r.status != http.StatusOK {
		t.Fatalf("current If-Match: %d %s", r.status, r.body)
	}
	r = f.do(t, call{method: "POST", path: "/api/v1/nodegroups/web/scale", token: adminToken, body: `{"targetSize":99}`})
	if r.status != http.StatusBadRequest || errorBody(t, r).Details["field"] != "targetSize" {
		t.Fatalf("target above max: %d %s", r.status, r.body)
	}
	r = f.do(t, call{method: "POST", path: "/api/v1/nodegroups/web/scale", token: adminToken, body: `{"targetSize":4}`, header: map[string]string{"If-Match": "nonsense"}})
	if r.status != http.StatusBadRequest {
		t.Fatalf("malformed If-Match: %d %s", r.status, r.body)
	}
}

// GET /status names the caller's role, so the status page knows whether
// to show write controls.
func TestStatusNamesRole(t *testing.T) {
	f := newFixture(t)
	f.seed()
	for token, want := range map[string]string{adminToken: "admin", readOnlyToken: "read-only"} {
		r := f.do(t, call{method: "GET", path: "/api/v1/status", token: token})
		var st struct{ Role string }
		if err := json.Unmarshal(r.body, &st); err != nil || st.Role != want {
			t.Errorf("role = %q (%v), want %q: %s", st.Role, err, want, r.body)
		}
	}
}
