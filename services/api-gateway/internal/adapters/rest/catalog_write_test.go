package rest_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/logging/logtest"

	"github.com/nodesmith/nodesmith/libs/sealed"
	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/natsreq"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/rest"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
)

const (
	secretID  = "AKIDcatalogtest"
	secretKey = "catalog-secret-key-value"
)

// newCatalogFixture is newFixture with a secrets key (nil: none), a log
// buffer, and a lifecycle stand-in that stores catalog entries in the read
// model and refuses to delete a template a group names.
func newCatalogFixture(t *testing.T, key *sealed.Key) (*fixture, *logtest.Buffer) {
	t.Helper()
	logs := &logtest.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f := &fixture{rm: app.NewReadModel(), lc: &natsreq.Fake{}}
	svc := app.NewService(f.rm, f.lc, app.Config{OpTimeout: 2 * time.Second}, log)
	auth, err := rest.NewAuthenticator(rest.TokenConfig{AdminTokens: []string{adminToken}, ReadOnlyTokens: []string{readOnlyToken}}, log)
	if err != nil {
		t.Fatal(err)
	}
	f.h = rest.NewHandler(svc, auth, rest.Options{MaxBodyBytes: 1024, SecretsKey: key, Logger: log})
	f.sync()
	f.seed()
	f.answerSetTarget()
	f.answerCatalog()
	return f, logs
}

func testKey(t *testing.T) *sealed.Key {
	t.Helper()
	k, err := sealed.NewKey(bytes.Repeat([]byte{9}, sealed.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func lastCatalogPut(t *testing.T, f *fixture) *lifecyclev1.PutCatalogEntry {
	t.Helper()
	calls := f.lc.WireCalls()
	for i := len(calls) - 1; i >= 0; i-- {
		if p := calls[i].GetPutCatalogEntry(); p != nil {
			return p
		}
	}
	t.Fatal("no PutCatalogEntry sent")
	return nil
}

func TestCatalogWrites(t *testing.T) {
	key := testKey(t)
	f, logs := newCatalogFixture(t, key)
	admin := func(method, path, body string, header ...string) response {
		t.Helper()
		c := call{method: method, path: path, token: adminToken, body: body}
		if len(header) == 2 {
			c.header = map[string]string{header[0]: header[1]}
		}
		return f.do(t, c)
	}

	// An account with credentials: sealed before it leaves the gateway.
	r := admin("PUT", "/api/v1/accounts/team", `{"regions":["ap-shanghai","ap-guangzhou"],"credentials":{"secretId":"`+secretID+`","secretKey":"`+secretKey+`"}}`)
	if r.status != http.StatusCreated || r.header.Get("ETag") == "" || r.header.Get("Location") != "/api/v1/accounts/team" {
		t.Fatalf("create account: %d %v %s", r.status, r.header, r.body)
	}
	var acct rest.Account
	if err := json.Unmarshal(r.body, &acct); err != nil {
		t.Fatal(err)
	}
	if !acct.Credentials.Stored || acct.Credentials.Source != "catalog" || acct.Credentials.KeyID != key.ID() || acct.Source != "api" ||
		strings.Join(acct.Regions, ",") != "ap-shanghai,ap-guangzhou" {
		t.Errorf("account = %+v", acct)
	}
	sent := lastCatalogPut(t, f).GetEntry().GetAccount()
	if bytes.Contains(sent.GetSealedCredentials(), []byte(secretKey)) {
		t.Fatal("the credentials were sent in plaintext")
	}
	creds, err := key.OpenCredentials("team", sent.GetSealedCredentials(), sent.GetKeyId())
	if err != nil || creds.KeyID != secretID || creds.Secret != secretKey {
		t.Fatalf("the sealed credentials do not open to what was sent: %v", err)
	}
	acctTag := r.header.Get("ETag")

	// Replacing without credentials keeps them; clearCredentials drops them.
	r = admin("PUT", "/api/v1/accounts/team", `{"regions":["ap-shanghai"]}`, "If-Match", acctTag)
	if r.status != http.StatusOK || !bytes.Equal(lastCatalogPut(t, f).GetEntry().GetAccount().GetSealedCredentials(), sent.GetSealedCredentials()) {
		t.Fatalf("replace without credentials: %d %s", r.status, r.body)
	}
	r = admin("PUT", "/api/v1/accounts/other", `{"clearCredentials":true}`)
	if r.status != http.StatusCreated || len(lastCatalogPut(t, f).GetEntry().GetAccount().GetSealedCredentials()) != 0 {
		t.Fatalf("account without credentials: %d %s", r.status, r.body)
	}
	if err := json.Unmarshal(r.body, &acct); err != nil || acct.Credentials.Stored || acct.Credentials.Source != "cloud-adapter" {
		t.Errorf("account without credentials = %+v", acct)
	}

	// A template on it: zone and instance type go into the parameters.
	r = admin("PUT", "/api/v1/templates/big", `{"account":"team","zone":"ap-shanghai-2","instanceType":"S5.LARGE8","hourlyPrice":0.5,
		"parameters":{"ImageId":"img-1","LoginSettings":{"Password":"p4ssw0rd"},"SystemDisk":{"DiskSize":9007199254740993}}}`)
	if r.status != http.StatusCreated || strings.Contains(string(r.body), "p4ssw0rd") {
		t.Fatalf("create template: %d %s", r.status, r.body)
	}
	tm := lastCatalogPut(t, f).GetEntry().GetTemplate()
	if tm.GetProvider() != "tencentcloud" || tm.GetAccount() != "team" ||
		tm.GetParametersJson() != `{"ImageId":"img-1","InstanceType":"S5.LARGE8","LoginSettings":{"Password":"p4ssw0rd"},"Placement":{"Zone":"ap-shanghai-2"},"SystemDisk":{"DiskSize":9007199254740993}}` {
		t.Errorf("template sent: %v", tm)
	}
	var info rest.TemplateInfo
	if err := json.Unmarshal(r.body, &info); err != nil || !info.HasParameters || info.Source != "api" || info.InstanceType != "S5.LARGE8" {
		t.Errorf("template = %+v, %v", info, err)
	}

	// A hook, then a group naming both.
	r = admin("PUT", "/api/v1/hooks/join", `{"script":"kubeadm join --token s3cr3t","timeout":"5m","env":{"X":"1"}}`)
	if r.status != http.StatusCreated || strings.Contains(string(r.body), "s3cr3t") {
		t.Fatalf("create hook: %d %s", r.status, r.body)
	}
	hookTag := r.header.Get("ETag")
	r = admin("PUT", "/api/v1/nodegroups/team-workers", `{"minSize":0,"maxSize":3,"instanceTemplate":{"name":"big"},"hooks":{"afterCreated":{"name":"join"}}}`)
	if r.status != http.StatusCreated {
		t.Fatalf("group naming catalog entries: %d %s", r.status, r.body)
	}
	g := lastPut(t, f).GetGroup()
	if g.GetInstanceTemplate().GetName() != "big" || g.GetInstanceTemplate().GetProvider() != "" || g.GetHooks().GetAfterCreated().GetName() != "join" || g.GetHooks().GetAfterCreated().GetScript() != "" {
		t.Errorf("group sent: %v", g)
	}

	// GETs carry the ETag and honour If-None-Match.
	for path, tag := range map[string]string{"/api/v1/hooks/join": hookTag, "/api/v1/accounts/other": ""} {
		r = f.do(t, call{method: "GET", path: path, token: readOnlyToken})
		if r.status != http.StatusOK || r.header.Get("ETag") == "" || (tag != "" && r.header.Get("ETag") != tag) {
			t.Errorf("GET %s: %d %v", path, r.status, r.header)
		}
		r = f.do(t, call{method: "GET", path: path, token: readOnlyToken, header: map[string]string{"If-None-Match": r.header.Get("ETag")}})
		if r.status != http.StatusNotModified {
			t.Errorf("GET %s with If-None-Match: %d", path, r.status)
		}
	}

	// Delete: an unused hook at its revision, not a template in use.
	r = admin("DELETE", "/api/v1/templates/big", "")
	if r.status != http.StatusConflict || !strings.Contains(errorBody(t, r).Message, "node groups team-workers") {
		t.Errorf("delete of a template in use: %d %s", r.status, r.body)
	}
	r = admin("PUT", "/api/v1/hooks/spare", `{"script":"true"}`)
	r = admin("DELETE", "/api/v1/hooks/spare", "", "If-Match", r.header.Get("ETag"))
	if r.status != http.StatusNoContent {
		t.Errorf("delete of an unused hook: %d %s", r.status, r.body)
	}
	if r := f.do(t, call{method: "GET", path: "/api/v1/hooks/spare", token: readOnlyToken}); r.status != http.StatusNotFound {
		t.Errorf("deleted hook still served: %d", r.status)
	}

	// No secret in any log line.
	for _, s := range []string{secretKey, "p4ssw0rd", "s3cr3t"} {
		if strings.Contains(logs.String(), s) {
			t.Errorf("a log line holds %q", s)
		}
	}
}

func TestCatalogWriteErrors(t *testing.T) {
	f, _ := newCatalogFixture(t, testKey(t))
	noKey, _ := newCatalogFixture(t, nil)
	for _, fx := range []*fixture{f, noKey} {
		for _, c := range []call{
			{method: "PUT", path: "/api/v1/accounts/team", token: adminToken, body: `{"provider":"tencentcloud","regions":["ap-shanghai"]}`},
			{method: "PUT", path: "/api/v1/templates/big", token: adminToken, body: `{"account":"team"}`},
			{method: "PUT", path: "/api/v1/hooks/join", token: adminToken, body: `{"script":"true"}`},
		} {
			if r := fx.do(t, c); r.status != http.StatusCreated {
				t.Fatalf("setup %s: %d %s", c.path, r.status, r.body)
			}
		}
	}
	big := `{"script":"` + strings.Repeat("x", 2000) + `"}`
	stale := map[string]string{"If-Match": `"1"`}
	tests := []struct {
		name   string
		f      *fixture
		call   call
		status int
		code   string
	}{
		{"anonymous", f, call{method: "PUT", path: "/api/v1/hooks/h", body: `{"script":"x"}`}, 401, "unauthenticated"},
		{"read-only token", f, call{method: "PUT", path: "/api/v1/hooks/h", token: readOnlyToken, body: `{"script":"x"}`}, 403, "permission_denied"},
		{"read-only delete", f, call{method: "DELETE", path: "/api/v1/hooks/join", token: readOnlyToken}, 403, "permission_denied"},
		{"invalid name", f, call{method: "PUT", path: "/api/v1/hooks/-bad-", token: adminToken, body: `{"script":"x"}`}, 400, "invalid_argument"},
		{"empty token in the name", f, call{method: "PUT", path: "/api/v1/hooks/a..b", token: adminToken, body: `{"script":"x"}`}, 400, "invalid_argument"},
		{"parameters: a string", f, call{method: "PUT", path: "/api/v1/templates/t", token: adminToken, body: `{"account":"team","parameters":"{}"}`}, 400, "invalid_argument"},
		{"name too long", f, call{method: "PUT", path: "/api/v1/accounts/" + strings.Repeat("a", 64), token: adminToken, body: `{}`}, 400, "invalid_argument"},
		{"body too large", f, call{method: "PUT", path: "/api/v1/hooks/h", token: adminToken, body: big}, 413, "invalid_argument"},
		{"not JSON", f, call{method: "PUT", path: "/api/v1/hooks/h", token: adminToken, body: `script=x`, contentType: "text/plain"}, 415, "invalid_argument"},
		{"malformed JSON", f, call{method: "PUT", path: "/api/v1/hooks/h", token: adminToken, body: `{"script":`}, 400, "invalid_argument"},
		{"unknown field", f, call{method: "PUT", path: "/api/v1/templates/t", token: adminToken, body: `{"account":"team","flavor":"x"}`}, 400, "invalid_argument"},
		{"bad If-Match", f, call{method: "PUT", path: "/api/v1/hooks/join", token: adminToken, body: `{"script":"x"}`, header: map[string]string{"If-Match": "7"}}, 400, "invalid_argument"},
		{"create over an existing entry", f, call{method: "PUT", path: "/api/v1/hooks/join", token: adminToken, body: `{"script":"x"}`}, 409, "already_exists"},
		{"stale If-Match", f, call{method: "PUT", path: "/api/v1/hooks/join", token: adminToken, body: `{"script":"x"}`, header: stale}, 412, "aborted"},
		{"If-Match on a missing entry", f, call{method: "PUT", path: "/api/v1/hooks/ghost", token: adminToken, body: `{"script":"x"}`, header: stale}, 404, "not_found"},
		{"hook: name differs", f, call{method: "PUT", path: "/api/v1/hooks/h", token: adminToken, body: `{"name":"other","script":"x"}`}, 400, "invalid_argument"},
		{"hook: no script", f, call{method: "PUT", path: "/api/v1/hooks/h", token: adminToken, body: `{"script":"  "}`}, 400, "invalid_argument"},
		{"hook: bad timeout", f, call{method: "PUT", path: "/api/v1/hooks/h", token: adminToken, body: `{"script":"x","timeout":"soon"}`}, 400, "invalid_argument"},
		{"hook: negative timeout", f, call{method: "PUT", path: "/api/v1/hooks/h", token: adminToken, body: `{"script":"x","timeout":"-1s"}`}, 400, "invalid_argument"},
		{"hook: bad onFailure", f, call{method: "PUT", path: "/api/v1/hooks/h", token: adminToken, body: `{"script":"x","onFailure":"RETRY"}`}, 400, "invalid_argument"},
		{"template: no account", f, call{method: "PUT", path: "/api/v1/templates/t", token: adminToken, body: `{"zone":"z"}`}, 400, "invalid_argument"},
		{"template: unknown account", f, call{method: "PUT", path: "/api/v1/templates/t", token: adminToken, body: `{"account":"nobody"}`}, 422, "failed_precondition"},
		{"template: name differs", f, call{method: "PUT", path: "/api/v1/templates/t", token: adminToken, body: `{"name":"u","account":"team"}`}, 400, "invalid_argument"},
		{"template: provider differs", f, call{method: "PUT", path: "/api/v1/templates/t", token: adminToken, body: `{"account":"team","provider":"aws"}`}, 400, "invalid_argument"},
		{"template: negative price", f, call{method: "PUT", path: "/api/v1/templates/t", token: adminToken, body: `{"account":"team","hourlyPrice":-1}`}, 400, "invalid_argument"},
		{"template: ssh port", f, call{method: "PUT", path: "/api/v1/templates/t", token: adminToken, body: `{"account":"team","sshPort":70000}`}, 400, "invalid_argument"},
		{"template: parameters not an object", f, call{method: "PUT", path: "/api/v1/templates/t", token: adminToken, body: `{"account":"team","parameters":[1]}`}, 400, "invalid_argument"},
		{"template: parameters unknown field", f, call{method: "PUT", path: "/api/v1/templates/t", token: adminToken, body: `{"account":"team","parameters":{"ImageName":"img-1"}}`}, 422, "invalid_argument"},
		{"template: parameters wrong type", f, call{method: "PUT", path: "/api/v1/templates/t", token: adminToken, body: `{"account":"team","parameters":{"InstanceCount":"two"}}`}, 422, "invalid_argument"},
		{"template: placement not an object", f, call{method: "PUT", path: "/api/v1/templates/t", token: adminToken, body: `{"account":"team","parameters":{"Placement":"z"}}`}, 400, "invalid_argument"},
		{"template: zone differs", f, call{method: "PUT", path: "/api/v1/templates/t", token: adminToken, body: `{"account":"team","zone":"a","parameters":{"Placement":{"Zone":"b"}}}`}, 400, "invalid_argument"},
		{"template: type differs", f, call{method: "PUT", path: "/api/v1/templates/t", token: adminToken, body: `{"account":"team","instanceType":"a","parameters":{"InstanceType":"b"}}`}, 400, "invalid_argument"},
		{"account: credentials without a key", noKey, call{method: "PUT", path: "/api/v1/accounts/a", token: adminToken, body: `{"credentials":{"secretId":"i","secretKey":"k"}}`}, 503, "unavailable"},
		{"account: incomplete credentials", f, call{method: "PUT", path: "/api/v1/accounts/a", token: adminToken, body: `{"credentials":{"secretId":"i"}}`}, 400, "invalid_argument"},
		{"account: credentials and clear", f, call{method: "PUT", path: "/api/v1/accounts/a", token: adminToken, body: `{"credentials":{"secretId":"i","secretKey":"k"},"clearCredentials":true}`}, 400, "invalid_argument"},
		{"account: empty region", f, call{method: "PUT", path: "/api/v1/accounts/a", token: adminToken, body: `{"regions":[""]}`}, 400, "invalid_argument"},
		{"account: duplicate region", f, call{method: "PUT", path: "/api/v1/accounts/a", token: adminToken, body: `{"regions":["r","r"]}`}, 400, "invalid_argument"},
		{"delete: unknown", f, call{method: "DELETE", path: "/api/v1/accounts/ghost", token: adminToken}, 404, "not_found"},
		{"delete: stale If-Match", f, call{method: "DELETE", path: "/api/v1/hooks/join", token: adminToken, header: stale}, 412, "aborted"},
		{"delete: a template defined inline in groups only", f, call{method: "DELETE", path: "/api/v1/templates/tpl", token: adminToken}, 404, "not_found"},
		{"group: unknown template", f, call{method: "PUT", path: "/api/v1/nodegroups/g", token: adminToken, body: `{"minSize":0,"maxSize":1,"instanceTemplate":{"name":"ghost"}}`}, 422, "failed_precondition"},
		{"group: unknown hook", f, call{method: "PUT", path: "/api/v1/nodegroups/g", token: adminToken, body: `{"minSize":0,"maxSize":1,"instanceTemplate":{"name":"big"},"hooks":{"beforeDelete":{"name":"ghost"}}}`}, 422, "failed_precondition"},
		{"group: hook name with options only", f, call{method: "PUT", path: "/api/v1/nodegroups/g", token: adminToken, body: `{"minSize":0,"maxSize":1,"instanceTemplate":{"name":"big"},"hooks":{"beforeDelete":{"name":"join","timeout":"1m"}}}`}, 400, "invalid_argument"},
		{"no credentials needed without a key", noKey, call{method: "PUT", path: "/api/v1/accounts/plain", token: adminToken, body: `{"regions":["r"]}`}, 201, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(tt.f.lc.WireCalls())
			r := tt.f.do(t, tt.call)
			if r.status != tt.status {
				t.Fatalf("status = %d, want %d: %s", r.status, tt.status, r.body)
			}
			if ct := r.header.Get("Content-Type"); tt.status != 201 && ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			if tt.code != "" {
				if e := errorBody(t, r); e.Code != tt.code {
					t.Errorf("code = %q, want %q (%s)", e.Code, tt.code, e.Message)
				}
				if tt.status != 409 && tt.status/100 == 4 && len(tt.f.lc.WireCalls()) != before {
					t.Errorf("a refused request reached lifecycle")
				}
			}
		})
	}
}

// Templates on an Alibaba Cloud account are checked against ECS
// RunInstances (libs/cloudspec): the zone and instance type fill ZoneId
// and InstanceType, what ECS needs must be there, what nodesmith sets must
// not, and each refusal names the field.
func TestCatalogAlibabaTemplates(t *testing.T) {
	f, _ := newCatalogFixture(t, testKey(t))
	if r := f.do(t, call{method: "PUT", path: "/api/v1/accounts/ali", token: adminToken, body: `{"provider":"alibabacloud","regions":["cn-hangzhou"]}`}); r.status != http.StatusCreated {
		t.Fatalf("create account: %d %s", r.status, r.body)
	}
	const rest = `"ImageId":"aliyun_3_x64_20G_alibase_20240528.vhd","VSwitchId":"vsw-1","SecurityGroupIds":["sg-1"]`
	r := f.do(t, call{method: "PUT", path: "/api/v1/templates/ecs", token: adminToken,
		body: `{"account":"ali","zone":"cn-hangzhou-h","instanceType":"ecs.g7.large","parameters":{` + rest + `,"SystemDisk":{"Category":"cloud_essd","Size":"40"}}}`})
	if r.status != http.StatusCreated {
		t.Fatalf("create template: %d %s", r.status, r.body)
	}
	tm := lastCatalogPut(t, f).GetEntry().GetTemplate()
	if tm.GetProvider() != "alibabacloud" || tm.GetZone() != "cn-hangzhou-h" ||
		tm.GetParametersJson() != `{"ImageId":"aliyun_3_x64_20G_alibase_20240528.vhd","InstanceType":"ecs.g7.large","SecurityGroupIds":["sg-1"],"SystemDisk":{"Category":"cloud_essd","Size":"40"},"VSwitchId":"vsw-1","ZoneId":"cn-hangzhou-h"}` {
		t.Errorf("template sent: %v", tm)
	}
	// Credentials have the same JSON names on every cloud; the error says
	// what they are on Alibaba Cloud.
	r = f.do(t, call{method: "PUT", path: "/api/v1/accounts/ali2", token: adminToken, body: `{"provider":"alibabacloud","credentials":{"secretId":"LTAIx"}}`})
	if e := errorBody(t, r); r.status != http.StatusBadRequest || !strings.Contains(e.Message, "the Alibaba Cloud AccessKeyId and AccessKeySecret") {
		t.Errorf("incomplete Alibaba credentials: %d %s", r.status, r.body)
	}
	r = f.do(t, call{method: "PUT", path: "/api/v1/accounts/ali2", token: adminToken, body: `{"provider":"alibabacloud","credentials":{"secretId":"STS.x","secretKey":"k","token":"sts"}}`})
	if r.status != http.StatusCreated {
		t.Fatalf("Alibaba STS credentials: %d %s", r.status, r.body)
	}
	// A required field may be a secret parameter.
	r = f.do(t, call{method: "PUT", path: "/api/v1/templates/ecs3", token: adminToken,
		body: `{"account":"ali","zone":"z","instanceType":"t","parameters":{"VSwitchId":"v","SecurityGroupId":"sg"},"secretParameters":{"ImageId":"m-private","Password":"p4ss"}}`})
	if r.status != http.StatusCreated || strings.Contains(string(r.body), "p4ss") {
		t.Fatalf("template with secret parameters: %d %s", r.status, r.body)
	}
	// The parameters alone name zone and type.
	r = f.do(t, call{method: "PUT", path: "/api/v1/templates/ecs2", token: adminToken,
		body: `{"account":"ali","parameters":{` + rest + `,"ZoneId":"cn-hangzhou-i","InstanceType":"ecs.c7.xlarge"}}`})
	if tm := lastCatalogPut(t, f).GetEntry().GetTemplate(); r.status != http.StatusCreated || tm.GetZone() != "cn-hangzhou-i" || tm.GetInstanceType() != "ecs.c7.xlarge" {
		t.Fatalf("template from parameters: %d %s %v", r.status, r.body, tm)
	}
	for _, tt := range []struct {
		name, body string
		status     int
		field      string
	}{
		{"nothing", `{"account":"ali"}`, 422, "parameters.ImageId"},
		{"no security group", `{"account":"ali","zone":"z","instanceType":"t","parameters":{"ImageId":"m","VSwitchId":"v"}}`, 422, "parameters.SecurityGroupId"},
		{"amount", `{"account":"ali","zone":"z","instanceType":"t","parameters":{` + rest + `,"Amount":3}}`, 422, "parameters.Amount"},
		{"region", `{"account":"ali","zone":"z","instanceType":"t","parameters":{` + rest + `,"RegionId":"cn-beijing"}}`, 422, "parameters.RegionId"},
		{"client token", `{"account":"ali","zone":"z","instanceType":"t","parameters":{` + rest + `,"ClientToken":"x"}}`, 422, "parameters.ClientToken"},
		{"tags", `{"account":"ali","zone":"z","instanceType":"t","parameters":{` + rest + `,"Tag":[{"Key":"a","Value":"b"}]}}`, 422, "parameters.Tag"},
		{"a Tencent field", `{"account":"ali","zone":"z","instanceType":"t","parameters":{` + rest + `,"Placement":{"Zone":"z"}}}`, 422, "parameters.Placement"},
		{"wrong type", `{"account":"ali","zone":"z","instanceType":"t","parameters":{` + rest + `,"DataDisk":[{"Size":"big"}]}}`, 422, "parameters.DataDisk[0].Size"},
		{"zone differs", `{"account":"ali","zone":"cn-hangzhou-h","parameters":{` + rest + `,"ZoneId":"cn-hangzhou-i"}}`, 400, "zone"},
		{"type differs", `{"account":"ali","instanceType":"a","parameters":{` + rest + `,"InstanceType":"b"}}`, 400, "instanceType"},
		{"a secret parameter ECS does not have", `{"account":"ali","zone":"z","instanceType":"t","parameters":{` + rest + `},"secretParameters":{"LoginPassword":"p4ss"}}`, 422, "secretParameters.LoginPassword"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := len(f.lc.WireCalls())
			r := f.do(t, call{method: "PUT", path: "/api/v1/templates/t", token: adminToken, body: tt.body})
			if r.status != tt.status {
				t.Fatalf("status = %d, want %d: %s", r.status, tt.status, r.body)
			}
			if e := errorBody(t, r); e.Code != "invalid_argument" || e.Details["field"] != tt.field || !strings.Contains(e.Message, tt.field+": ") {
				t.Errorf("error = %+v, want field %q", e, tt.field)
			}
			if len(f.lc.WireCalls()) != before {
				t.Error("a refused template reached lifecycle")
			}
		})
	}
}
