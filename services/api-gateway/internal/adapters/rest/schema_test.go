package rest_test

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
)

// The REST API rejects each bad group at the same field as lifecycle's
// configuration file loader (its yamlconfig tests read the same
// documents).
func TestSameErrorsAsTheConfigFile(t *testing.T) {
	b, err := os.ReadFile("../../../../../libs/restapi/testdata/invalid-groups.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name, Field string
		Group       json.RawMessage
	}
	if err := json.Unmarshal(b, &cases); err != nil || len(cases) == 0 {
		t.Fatalf("fixture: %v", err)
	}
	f := newFixture(t)
	f.seed()
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			r := f.do(t, call{method: "PUT", path: "/api/v1/nodegroups/g", token: adminToken, body: string(tt.Group)})
			if r.status != http.StatusBadRequest {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if e := errorBody(t, r); e.Details["field"] != tt.Field {
				t.Errorf("details.field = %v, want %s (%s)", e.Details["field"], tt.Field, e.Message)
			}
		})
	}
}

// The old spellings are accepted in a PUT and a PATCH, each answered with
// a Warning header; the view shows only the new names.
func TestDeprecatedNamesAnswerAWarning(t *testing.T) {
	f := newFixture(t)
	f.seed()
	f.answerSetTarget()
	body := strings.NewReplacer(`"scaleDownUnneededTime"`, `"scaleDownUnneeded"`, `"maxNodeProvisionTime"`, `"maxNodeProvision"`,
		`"onFailure": "block"`, `"onFailure": "ON_FAILURE_BLOCK"`).Replace(newGroup)
	r := f.do(t, call{method: "PUT", path: "/api/v1/nodegroups/batch", token: adminToken, body: body})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	warnings := strings.Join(r.header.Values("Warning"), "\n")
	for _, want := range []string{`299 - "autoscalingOptions.scaleDownUnneeded: is deprecated: use scaleDownUnneededTime"`,
		`299 - "autoscalingOptions.maxNodeProvision: is deprecated: use maxNodeProvisionTime"`} {
		if !strings.Contains(warnings, want) {
			t.Errorf("Warning headers lack %s:\n%s", want, warnings)
		}
	}
	g := lastPut(t, f).GetGroup()
	if g.GetAutoscalingOptions().GetScaleDownUnneeded().AsDuration().String() != "5m0s" || g.GetHooks().GetBeforeDelete().GetOnFailure().String() != "ON_FAILURE_BLOCK" {
		t.Errorf("record %v", g)
	}
	if strings.Contains(string(r.body), `"scaleDownUnneeded"`) || !strings.Contains(string(r.body), `"scaleDownUnneededTime"`) {
		t.Errorf("the view does not use the canonical names: %s", r.body)
	}

	r = f.do(t, call{method: "PATCH", path: "/api/v1/nodegroups/batch", token: adminToken, body: `{"autoscalingOptions": {"scaleDownUnready": "7m"}}`, contentType: "application/merge-patch+json"})
	if r.status != http.StatusOK || !strings.Contains(r.header.Get("Warning"), "scaleDownUnready: is deprecated: use scaleDownUnreadyTime") {
		t.Fatalf("patch: %d %v %s", r.status, r.header, r.body)
	}
	if lastPut(t, f).GetGroup().GetAutoscalingOptions().GetScaleDownUnready().AsDuration().String() != "7m0s" {
		t.Errorf("patched record %v", lastPut(t, f).GetGroup())
	}
	// A name and its deprecated spelling together are refused.
	r = f.do(t, call{method: "PATCH", path: "/api/v1/nodegroups/batch", token: adminToken, body: `{"autoscalingOptions": {"scaleDownUnready": "7m", "scaleDownUnreadyTime": "8m"}}`, contentType: "application/merge-patch+json"})
	if r.status != http.StatusBadRequest {
		t.Errorf("both spellings: %d %s", r.status, r.body)
	}
}
