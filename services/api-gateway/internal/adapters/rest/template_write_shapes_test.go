package rest_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudshapes"
	"github.com/nodesmith/nodesmith/libs/cloudspec"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/natsreq"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/rest"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
)

// PUT and PATCH /templates with offerings, end to end through the REST
// schema: a mixed list is 422 naming the field, a list of one shape is
// written, an unanswered question writes it with a 299 Warning, a
// template without offerings asks nothing.
func TestTemplateWriteChecksOfferingShapes(t *testing.T) {
	var down bool
	calls := 0 // the handler runs in the test's goroutine (httptest)
	ask := func(_ context.Context, _ cloudshapes.Target, _, _ []string) ([]cloudspec.Shape, error) {
		calls++
		if down {
			return nil, errors.New("no cloud adapter is answering")
		}
		return []cloudspec.Shape{
			{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4", VCPU: 2, MemoryMiB: 4096, Arch: "amd64"},
			{Zone: "ap-guangzhou-4", InstanceType: "S5.MEDIUM4", VCPU: 2, MemoryMiB: 4096, Arch: "amd64"},
			{Zone: "ap-guangzhou-4", InstanceType: "SR1.MEDIUM4", VCPU: 2, MemoryMiB: 4096, Arch: "arm64"},
		}, nil
	}
	log := slog.New(slog.DiscardHandler)
	f := &fixture{rm: app.NewReadModel(), lc: &natsreq.Fake{}}
	svc := app.NewService(f.rm, f.lc, app.Config{OpTimeout: 2 * time.Second}, log)
	auth, err := rest.NewAuthenticator(rest.TokenConfig{AdminTokens: []string{adminToken}, ReadOnlyTokens: []string{readOnlyToken}}, log)
	if err != nil {
		t.Fatal(err)
	}
	f.h = rest.NewHandler(svc, auth, rest.Options{MaxBodyBytes: 1 << 16, Shapes: ask, Logger: log})
	f.sync()
	f.seed()
	f.answerSetTarget()
	f.answerCatalog()
	if r := f.do(t, call{method: "PUT", path: "/api/v1/accounts/team", token: adminToken, body: `{"provider":"tencentcloud","regions":["ap-guangzhou"]}`}); r.status != http.StatusCreated {
		t.Fatalf("account: %d %s", r.status, r.body)
	}
	r := f.do(t, call{method: "PUT", path: "/api/v1/templates/mixed", token: adminToken,
		body: `{"account":"team","offerings":[{"zone":"ap-guangzhou-3","instanceType":"S5.MEDIUM4"},{"zone":"ap-guangzhou-4","instanceType":"SR1.MEDIUM4"}],"parameters":{"ImageId":"img-1"}}`})
	if r.status != 422 || !strings.Contains(string(r.body), `"field": "offerings[1].instanceType"`) ||
		!strings.Contains(string(r.body), "SR1.MEDIUM4 (2 vCPU, 4 GiB, arm64) differs from offerings[0] S5.MEDIUM4 (2 vCPU, 4 GiB, amd64)") {
		t.Errorf("mixed: %d %s", r.status, r.body)
	}
	r = f.do(t, call{method: "PUT", path: "/api/v1/templates/ok", token: adminToken,
		body: `{"account":"team","offerings":[{"zone":"ap-guangzhou-3","instanceType":"S5.MEDIUM4"},{"zone":"ap-guangzhou-4","instanceType":"S5.MEDIUM4"}],"parameters":{"ImageId":"img-1"}}`})
	if r.status != 201 || r.header.Get("Warning") != "" {
		t.Errorf("ok: %d %v %s", r.status, r.header, r.body)
	}
	down = true
	r = f.do(t, call{method: "PUT", path: "/api/v1/templates/unchecked", token: adminToken,
		body: `{"account":"team","offerings":[{"zone":"ap-guangzhou-3","instanceType":"S5.MEDIUM4"},{"zone":"ap-guangzhou-4","instanceType":"SR1.MEDIUM4"}],"parameters":{"ImageId":"img-1"}}`})
	if r.status != 201 || r.header.Get("Warning") != `299 - "offerings not checked against the cloud's instance shapes: no cloud adapter is answering"` {
		t.Errorf("unchecked: %d, Warning %q", r.status, r.header.Get("Warning"))
	}
	n := calls
	r = f.do(t, call{method: "PUT", path: "/api/v1/templates/plain", token: adminToken, body: `{"account":"team","zone":"ap-guangzhou-3","instanceType":"S5.MEDIUM4","parameters":{"ImageId":"img-1"}}`})
	if r.status != 201 || calls != n {
		t.Errorf("plain: %d, %d calls", r.status, calls-n)
	}
	// PATCH of offerings is checked too.
	down = false
	r = f.do(t, call{method: "PATCH", path: "/api/v1/templates/ok", token: adminToken, contentType: "application/merge-patch+json",
		body: `{"offerings":[{"zone":"ap-guangzhou-4","instanceType":"SR1.MEDIUM4"},{"zone":"ap-guangzhou-3","instanceType":"S5.MEDIUM4"}]}`})
	if r.status != 422 || !strings.Contains(string(r.body), `"field": "offerings[1].instanceType"`) {
		t.Errorf("patch: %d %s", r.status, r.body)
	}
}
