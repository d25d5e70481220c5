package rest_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/libs/contract"

	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"

	"github.com/nodesmith/nodesmith/libs/providerid"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/rest"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/ports"
)

// POST /instances/{id}/delete is a scale-down of one instance: lifecycle's
// DeleteNodes for the instance's group naming its provider ID (the path
// through the before_delete hook), never the forced InstanceAction.
func TestDeleteInstanceGracefullyIsDeleteNodes(t *testing.T) {
	f := newFixture(t)
	f.seed()
	f.answerSetTarget()
	others := f.lc.HandleWire
	f.lc.HandleWire = func(ctx context.Context, req *lifecyclev1.Request) (ports.Revisions, error) {
		if req.GetDeleteNodes() != nil {
			return ports.Revisions{}, nil // what it writes is lifecycle's business
		}
		return others(ctx, req)
	}

	r := f.do(t, call{method: "POST", path: "/api/v1/instances/i-2/delete", token: adminToken})
	if r.status != 202 {
		t.Fatalf("graceful delete: %d %s", r.status, r.body)
	}
	var inst rest.Instance
	if err := json.Unmarshal(r.body, &inst); err != nil || inst.ID != "i-2" {
		t.Fatalf("answer is not the instance: %v %s", err, r.body)
	}
	calls := f.lc.WireCalls()
	if len(calls) != 1 {
		t.Fatalf("lifecycle got %d requests, want 1: %v", len(calls), calls)
	}
	del := calls[0].GetDeleteNodes()
	if del == nil {
		t.Fatalf("lifecycle got %T, want DeleteNodes", calls[0].GetOp())
	}
	if del.GetGroup() != "web" || len(del.GetNodes()) != 1 || del.GetNodes()[0].GetProviderId() != providerid.Placeholder("web", "i-2") {
		t.Fatalf("DeleteNodes = %v, want group web and i-2's provider ID", del)
	}
	for _, c := range calls {
		if c.GetInstanceAction().GetAction() == lifecyclev1.InstanceAction_ACTION_FORCE_DELETE {
			t.Fatal("graceful delete sent a force delete")
		}
	}

	// Read-only tokens may not; unknown instances are 404; lifecycle's
	// refusal (the group at its minimum) is a 400 with its message.
	if r := f.do(t, call{method: "POST", path: "/api/v1/instances/i-2/delete", token: readOnlyToken}); r.status != 403 {
		t.Errorf("read-only token: %d, want 403", r.status)
	}
	if r := f.do(t, call{method: "POST", path: "/api/v1/instances/nope/delete", token: adminToken}); r.status != 404 {
		t.Errorf("unknown instance: %d, want 404", r.status)
	}
	f.lc.FailNext(domain.Errorf(contract.CodeOutOfRange, "deleting 1 nodes would take \"web\" below its min size 1 (target 1)"))
	r = f.do(t, call{method: "POST", path: "/api/v1/instances/i-1/delete", token: adminToken})
	if e := errorBody(t, r); r.status != 400 || e.Code != "out_of_range" || !strings.Contains(e.Message, "below its min size") {
		t.Errorf("refused delete: %d %+v, want 400 out_of_range with lifecycle's message", r.status, e)
	}
}
