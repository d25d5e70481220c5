package rest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/libs/contract"

	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/rest"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/ports"
)

func TestAdoptRoute(t *testing.T) {
	f := newFixture(t)
	f.seed()
	var got *lifecyclev1.AdoptVMs
	f.lc.HandleWire = func(_ context.Context, req *lifecyclev1.Request) (ports.Revisions, error) {
		got = req.GetAdoptVms()
		if len(got.GetVms()) > 2 {
			return ports.Revisions{}, domain.Errorf(contract.CodeOutOfRange, "adopting 3 VMs would take node group \"web\"'s target from 2 to 5, beyond its max size 4")
		}
		return ports.Revisions{Adopted: []ports.AdoptOutcome{
			{VM: ports.AdoptVM{CloudID: got.GetVms()[0].GetCloudId()}, Result: ports.Adopted, InstanceID: "web-abc", Message: "adopted as a Running instance"},
			{VM: ports.AdoptVM{CloudID: got.GetVms()[1].GetCloudId()}, Result: ports.AdoptRefused, Message: "no VM ins-2"},
		}}, nil
	}
	body := `{"instances":[{"cloudID":"ins-1","nodeName":"n1","providerID":"tencentcloud:///ap-guangzhou/ins-1","privateIP":"10.0.0.1"},` +
		`{"cloudID":"ins-2","nodeName":"n2","providerID":"tencentcloud:///ap-guangzhou/ins-2"}],"dryRun":true}`

	r := f.do(t, call{method: "POST", path: "/api/v1/nodegroups/web/adopt", token: adminToken, body: body})
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var resp rest.AdoptResponse
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Group != "web" || !resp.DryRun || resp.Adopted != 1 || resp.Refused != 1 || len(resp.Results) != 2 ||
		resp.Results[0].Result != "adopted" || resp.Results[0].InstanceID != "web-abc" || resp.Results[1].Message != "no VM ins-2" {
		t.Errorf("response %+v", resp)
	}
	if got.GetGroup() != "web" || !got.GetDryRun() || got.GetVms()[0].GetPrivateIp() != "10.0.0.1" || got.GetVms()[1].GetProviderId() != "tencentcloud:///ap-guangzhou/ins-2" {
		t.Errorf("lifecycle request %v", got)
	}

	// Beyond the max size: lifecycle's refusal, as a 400 naming it.
	three := `{"instances":[{"cloudID":"a","nodeName":"a","providerID":"a"},{"cloudID":"b","nodeName":"b","providerID":"b"},{"cloudID":"c","nodeName":"c","providerID":"c"}]}`
	r = f.do(t, call{method: "POST", path: "/api/v1/nodegroups/web/adopt", token: adminToken, body: three})
	if e := errorBody(t, r); r.status != http.StatusBadRequest || e.Code != "out_of_range" || !strings.Contains(e.Message, "max size 4") {
		t.Errorf("beyond max: %d %+v", r.status, e)
	}

	calls := len(f.lc.WireCalls())
	for _, tc := range []struct {
		name, path, token, body, field string
		status                         int
	}{
		{"read-only token", "/api/v1/nodegroups/web/adopt", readOnlyToken, body, "", http.StatusForbidden},
		{"unknown group", "/api/v1/nodegroups/nope/adopt", adminToken, body, "", http.StatusNotFound},
		{"no instances", "/api/v1/nodegroups/web/adopt", adminToken, `{"instances":[]}`, "instances", http.StatusBadRequest},
		{"missing provider id", "/api/v1/nodegroups/web/adopt", adminToken, `{"instances":[{"cloudID":"ins-1","nodeName":"n1"}]}`, "instances[0].providerID", http.StatusBadRequest},
		{"unknown field", "/api/v1/nodegroups/web/adopt", adminToken, `{"instances":[{"cloudId":"ins-1"}]}`, "", http.StatusBadRequest},
	} {
		r := f.do(t, call{method: "POST", path: tc.path, token: tc.token, body: tc.body})
		e := errorBody(t, r)
		if r.status != tc.status || (tc.field != "" && e.Details["field"] != tc.field) {
			t.Errorf("%s: %d %+v", tc.name, r.status, e)
		}
	}
	if len(f.lc.WireCalls()) != calls {
		t.Errorf("refused requests reached lifecycle: %d calls", len(f.lc.WireCalls())-calls)
	}
}
