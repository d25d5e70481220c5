package rest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/libs/contract"

	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/rest"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

const newGroup = `{
  "minSize": 0, "maxSize": 5,
  "instanceTemplate": {"name": "std", "provider": "tencentcloud", "region": "ap-guangzhou", "zone": "ap-guangzhou-3",
    "instanceType": "S5.MEDIUM4", "hourlyPrice": 0.2, "parameters": {"ImageId": "img-1", "LoginSettings": {"Password": "p4ssw0rd"}}},
  "nodeTemplate": {"labels": {"role": "batch"}, "capacity": {"cpu": "2", "memory": "4Gi"},
    "taints": [{"key": "batch", "value": "true", "effect": "NoSchedule"}]},
  "autoscalingOptions": {"scaleDownUnneededTime": "5m", "maxNodeProvisionTime": "20m"},
  "hooks": {"afterCreated": {"name": "join", "script": "kubeadm join --token s3cr3t", "timeout": "10m"},
            "beforeDelete": {"script": "drain.sh", "onFailure": "block"}},
  "parallelism": {"create": 10, "delete": 5}
}`

func lastPut(t *testing.T, f *fixture) *lifecyclev1.PutGroup {
	t.Helper()
	calls := f.lc.WireCalls()
	for i := len(calls) - 1; i >= 0; i-- {
		if p := calls[i].GetPutGroup(); p != nil {
			return p
		}
	}
	t.Fatal("no PutGroup sent")
	return nil
}

func TestPutGroup(t *testing.T) {
	f := newFixture(t)
	f.seed()
	f.answerSetTarget()

	r := f.do(t, call{method: "PUT", path: "/api/v1/nodegroups/batch", token: adminToken, body: newGroup})
	if r.status != http.StatusCreated || r.header.Get("Location") != "/api/v1/nodegroups/batch" || r.header.Get("ETag") == "" {
		t.Fatalf("create: %d %v %s", r.status, r.header, r.body)
	}
	if strings.Contains(string(r.body), "s3cr3t") || strings.Contains(string(r.body), "p4ssw0rd") {
		t.Fatalf("write-only fields returned: %s", r.body)
	}
	put := lastPut(t, f)
	g := put.GetGroup()
	if put.GetExpectedRevision() != 0 || put.GetUpsert() || g.GetSource() != "api" || g.GetTargetSize() != 0 ||
		g.GetHooks().GetAfterCreated().GetScript() != "kubeadm join --token s3cr3t" ||
		g.GetHooks().GetBeforeDelete().GetOnFailure().String() != "ON_FAILURE_BLOCK" ||
		g.GetInstanceTemplate().GetParametersJson() != `{"ImageId":"img-1","LoginSettings":{"Password":"p4ssw0rd"}}` ||
		g.GetAutoscalingOptions().GetMaxNodeProvision().AsDuration().String() != "20m0s" ||
		g.GetNodeTemplate().GetTaints()[0].GetEffect() != "NoSchedule" || g.GetParallelism().GetCreate() != 10 {
		t.Fatalf("PutGroup sent: %v", put)
	}
	tag := r.header.Get("ETag")

	// Without If-Match PUT only creates.
	r = f.do(t, call{method: "PUT", path: "/api/v1/nodegroups/batch", token: adminToken, body: newGroup})
	if r.status != http.StatusConflict || errorBody(t, r).Code != "already_exists" {
		t.Fatalf("second create: %d %s", r.status, r.body)
	}
	// A stale revision is refused before anything is sent.
	calls := len(f.lc.WireCalls())
	r = f.do(t, call{method: "PUT", path: "/api/v1/nodegroups/batch", token: adminToken, body: newGroup, header: map[string]string{"If-Match": `"1"`}})
	if r.status != http.StatusPreconditionFailed || len(f.lc.WireCalls()) != calls {
		t.Fatalf("stale If-Match: %d %s", r.status, r.body)
	}
	// Replace at the current revision keeps the target when not given.
	f.do(t, call{method: "POST", path: "/api/v1/nodegroups/batch/scale", token: adminToken, body: `{"targetSize":4}`})
	cur := f.do(t, call{method: "GET", path: "/api/v1/nodegroups/batch", token: adminToken})
	replaced := strings.Replace(newGroup, `"maxSize": 5`, `"maxSize": 3`, 1)
	r = f.do(t, call{method: "PUT", path: "/api/v1/nodegroups/batch", token: adminToken, body: replaced, header: map[string]string{"If-Match": cur.header.Get("ETag")}})
	if r.status != http.StatusOK || r.header.Get("ETag") == tag {
		t.Fatalf("replace: %d %s", r.status, r.body)
	}
	if put := lastPut(t, f); put.GetGroup().GetTargetSize() != 3 || put.GetExpectedRevision() == 0 {
		t.Fatalf("replace must clamp the kept target (4) to the new max (3) and be conditional: %v", put)
	}
	// If-Match * upserts.
	r = f.do(t, call{method: "PUT", path: "/api/v1/nodegroups/batch", token: adminToken, body: newGroup, header: map[string]string{"If-Match": "*"}})
	if r.status != http.StatusOK || !lastPut(t, f).GetUpsert() {
		t.Fatalf("upsert: %d %s", r.status, r.body)
	}
	// Lifecycle's own compare-and-set conflict is a 412 too.
	f.lc.FailNext(domain.Errorf(contract.CodeAborted, "revision changed"))
	cur = f.do(t, call{method: "GET", path: "/api/v1/nodegroups/batch", token: adminToken})
	r = f.do(t, call{method: "PUT", path: "/api/v1/nodegroups/batch", token: adminToken, body: newGroup, header: map[string]string{"If-Match": cur.header.Get("ETag")}})
	if r.status != http.StatusPreconditionFailed {
		t.Fatalf("lifecycle conflict: %d %s", r.status, r.body)
	}
}

func TestPutGroupValidation(t *testing.T) {
	f := newFixture(t)
	f.seed()
	f.answerSetTarget()
	edit := func(old, repl string) string {
		if !strings.Contains(newGroup, old) {
			t.Fatalf("fixture lacks %q", old)
		}
		return strings.Replace(newGroup, old, repl, 1)
	}
	tests := []struct {
		name, id, body string
		field          string
	}{
		{"id with a dot", "a.b", newGroup, ""},
		{"max below min", "x", edit(`"minSize": 0`, `"minSize": 9`), "minSize"},
		{"no sizes", "x", edit(`"minSize": 0, "maxSize": 5,`, ``), "maxSize"},
		{"no provider", "x", edit(`"provider": "tencentcloud", `, ``), "instanceTemplate.provider"},
		{"bad quantity", "x", edit(`"cpu": "2"`, `"cpu": "two"`), "nodeTemplate.capacity.cpu"},
		{"bad taint", "x", edit(`"effect": "NoSchedule"`, `"effect": "Never"`), "nodeTemplate.taints[0].effect"},
		{"bad duration", "x", edit(`"scaleDownUnneededTime": "5m"`, `"scaleDownUnneededTime": "5 minutes"`), "autoscalingOptions.scaleDownUnneededTime"},
		{"zero max provision", "x", edit(`"maxNodeProvisionTime": "20m"`, `"maxNodeProvisionTime": "0s"`), "autoscalingOptions.maxNodeProvisionTime"},
		{"id differs from the path", "x", edit(`"minSize": 0`, `"id": "y", "minSize": 0`), "id"},
		{"hook file", "x", edit(`"script": "drain.sh"`, `"file": "drain.sh"`), "hooks.beforeDelete.file"},
		{"empty script", "x", edit(`"script": "drain.sh"`, `"script": " "`), "hooks.beforeDelete.script"},
		{"bad onFailure", "x", edit(`"onFailure": "block"`, `"onFailure": "RETRY"`), "hooks.beforeDelete.onFailure"},
		{"parameters not an object", "x", edit(`"parameters": {"ImageId": "img-1", "LoginSettings": {"Password": "p4ssw0rd"}}`, `"parameters": [1]`), "instanceTemplate.parameters"},
		{"unknown field", "x", edit(`"minSize": 0`, `"minSize": 0, "color": "red"`), "color"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.do(t, call{method: "PUT", path: "/api/v1/nodegroups/" + tt.id, token: adminToken, body: tt.body})
			if r.status != http.StatusBadRequest {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			e := errorBody(t, r)
			if tt.field != "" && e.Details["field"] != tt.field {
				t.Errorf("details.field = %v, want %q (%s)", e.Details["field"], tt.field, e.Message)
			}
		})
	}
	for _, c := range f.lc.WireCalls() {
		if c.GetPutGroup() != nil {
			t.Fatalf("an invalid group reached lifecycle: %v", c)
		}
	}
}

func TestPatchGroupKeepsWriteOnlyFields(t *testing.T) {
	f := newFixture(t)
	f.seed()
	f.answerSetTarget()
	if r := f.do(t, call{method: "PUT", path: "/api/v1/nodegroups/batch", token: adminToken, body: newGroup}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	patch := `{"maxSize": 20, "hooks": {"afterCreated": {"timeout": "3m"}}, "autoscalingOptions": null, "nodeTemplate": {"labels": {"tier": "spot"}}}`
	r := f.do(t, call{method: "PATCH", path: "/api/v1/nodegroups/batch", token: adminToken, body: patch, contentType: "application/merge-patch+json"})
	if r.status != http.StatusOK {
		t.Fatalf("patch: %d %s", r.status, r.body)
	}
	g := lastPut(t, f).GetGroup()
	if g.GetMaxSize() != 20 || g.GetHooks().GetAfterCreated().GetScript() != "kubeadm join --token s3cr3t" ||
		g.GetHooks().GetAfterCreated().GetTimeout().AsDuration().String() != "3m0s" || g.GetAutoscalingOptions() != nil ||
		g.GetNodeTemplate().GetLabels()["tier"] != "spot" || g.GetNodeTemplate().GetLabels()["role"] != "batch" ||
		!strings.Contains(g.GetInstanceTemplate().GetParametersJson(), "p4ssw0rd") {
		t.Fatalf("patched group: %v", g)
	}
	var view rest.Group
	if err := json.Unmarshal(r.body, &view); err != nil || view.MaxSize != 20 || strings.Contains(string(r.body), "s3cr3t") {
		t.Fatalf("patch response: %s", r.body)
	}

	for _, tt := range []struct {
		name, body, ct string
		header         map[string]string
		status         int
	}{
		{"stale If-Match", `{"maxSize": 7}`, "", map[string]string{"If-Match": `"1"`}, http.StatusPreconditionFailed},
		{"malformed If-Match", `{"maxSize": 7}`, "", map[string]string{"If-Match": `W/"x"`}, http.StatusBadRequest},
		{"not an object", `[1]`, "", nil, http.StatusBadRequest},
		{"malformed", `{"maxSize":`, "", nil, http.StatusBadRequest},
		{"invalid result", `{"minSize": 30}`, "", nil, http.StatusBadRequest},
		{"unknown field", `{"colour": "red"}`, "", nil, http.StatusBadRequest},
		{"wrong type", `{"maxSize": "big"}`, "", nil, http.StatusBadRequest},
		{"wrong content type", `{"maxSize": 7}`, "text/plain", nil, http.StatusUnsupportedMediaType},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := f.do(t, call{method: "PATCH", path: "/api/v1/nodegroups/batch", token: adminToken, body: tt.body, contentType: tt.ct, header: tt.header})
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
			}
			errorBody(t, r)
		})
	}
	if r := f.do(t, call{method: "PATCH", path: "/api/v1/nodegroups/nope", token: adminToken, body: `{}`}); r.status != http.StatusNotFound {
		t.Errorf("patch unknown group: %d", r.status)
	}
}

func TestDeleteGroup(t *testing.T) {
	f := newFixture(t)
	f.seed()
	f.answerSetTarget()
	if r := f.do(t, call{method: "DELETE", path: "/api/v1/nodegroups/web", token: adminToken, header: map[string]string{"If-Match": `"99"`}}); r.status != http.StatusPreconditionFailed {
		t.Fatalf("stale delete: %d %s", r.status, r.body)
	}
	if r := f.do(t, call{method: "DELETE", path: "/api/v1/nodegroups/web", token: readOnlyToken}); r.status != http.StatusForbidden {
		t.Fatalf("read-only delete: %d", r.status)
	}
	r := f.do(t, call{method: "DELETE", path: "/api/v1/nodegroups/web", token: adminToken, header: map[string]string{"If-Match": `"1"`}})
	if r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := f.do(t, call{method: "GET", path: "/api/v1/nodegroups/web", token: adminToken}); r.status != http.StatusNotFound {
		t.Fatalf("deleted group still served: %d", r.status)
	}
	if r := f.do(t, call{method: "DELETE", path: "/api/v1/nodegroups/web", token: adminToken}); r.status != http.StatusNotFound {
		t.Fatalf("delete twice: %d", r.status)
	}
}
