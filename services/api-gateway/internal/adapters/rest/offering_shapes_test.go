package rest_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/cloudshapes"
	"github.com/nodesmith/nodesmith/libs/cloudshapes/natsask"
	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/natsreq"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/rest"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

const warnPrefix = `299 - "offerings not checked against the cloud's instance shapes: `

// A template write with offerings asks the cloud adapters (over real NATS
// as the gateway's identity): a mixed or unoffered list is 422 naming the
// field; no adapter answering, or a cloud that cannot tell, writes it
// with a 299 Warning saying why.
func TestTemplateOfferingShapes(t *testing.T) {
	env := natstest.Start(t)
	gw, _ := env.ConnectAs(t, natsauth.APIGateway)
	ca, _ := env.ConnectAs(t, natsauth.CloudAdapter)
	ask := natsask.New(gw)

	tmpl := &domain.InstanceTemplate{Name: "web", Provider: "tencentcloud", Account: "prod", Region: "ap-guangzhou", Offerings: []domain.Offering{
		{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4"}, {Zone: "ap-guangzhou-4", InstanceType: "SR1.MEDIUM4"}, {Zone: "ap-guangzhou-6", InstanceType: "S5.MEDIUM4"},
	}}

	// No cloud adapter subscribed.
	start := time.Now()
	w := rest.CheckOfferingShapes(ask, tmpl)
	if w.Code != http.StatusOK || w.Header().Get("Warning") != warnPrefix+`no cloud adapter is answering"` {
		t.Errorf("without an adapter: %d, Warning %q", w.Code, w.Header().Get("Warning"))
	}
	if d := time.Since(start); d > cloudshapes.Timeout {
		t.Errorf("no responders took %v", d)
	}

	// A cloud adapter answering from a catalogue (as the cloud adapter's
	// queue group does).
	var mu sync.Mutex
	var asked []*cloudv1.ShapesRequest
	questions := func() []*cloudv1.ShapesRequest {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(asked)
	}
	sub, err := ca.QueueSubscribe(messaging.SubjectCloudShapes, messaging.QueueCloudShapes, func(m *nats.Msg) {
		var req cloudv1.ShapesRequest
		if err := proto.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("request: %v", err)
			return
		}
		mu.Lock()
		asked = append(asked, &req)
		mu.Unlock()
		reply := &cloudv1.ShapesReply{}
		switch req.GetTarget().GetAccount() {
		case "alibaba":
			reply.Error = &cloudv1.CloudError{Code: cloudshapes.CodeNotSupported, Message: "alibaba cloud instance shapes: not supported by this cloud"}
		case "broken":
			reply.Error = &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_AUTH, Code: "AuthFailure", Message: "AuthFailure.SecretIdNotFound: no such key"}
		case "slow":
			return // never answers
		default:
			reply.Shapes = []*cloudv1.InstanceShape{
				{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4", Cpu: 2, MemoryMib: 4096, Arch: "amd64"},
				{Zone: "ap-guangzhou-4", InstanceType: "S5.MEDIUM4", Cpu: 2, MemoryMib: 4096, Arch: "amd64"},
				{Zone: "ap-guangzhou-4", InstanceType: "SR1.MEDIUM4", Cpu: 2, MemoryMib: 4096, Arch: "arm64"},
				{Zone: "ap-guangzhou-4", InstanceType: "SA2.MEDIUM4", Cpu: 2, MemoryMib: 4096, Arch: "amd64"},
			}
		}
		data, _ := proto.Marshal(reply)
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := ca.Flush(); err != nil {
		t.Fatal(err)
	}

	w = rest.CheckOfferingShapes(ask, tmpl)
	if w.Code != http.StatusUnprocessableEntity || w.Header().Get("Warning") != "" {
		t.Fatalf("mixed offerings: %d, Warning %q: %s", w.Code, w.Header().Get("Warning"), w.Body)
	}
	var body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Details struct {
			Field  string `json:"field"`
			Errors []struct{ Field, Message string }
		} `json:"details"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if body.Code != "invalid_argument" || body.Details.Field != "offerings[1].instanceType" || len(body.Details.Errors) != 2 ||
		body.Details.Errors[0].Message != "SR1.MEDIUM4 (2 vCPU, 4 GiB, arm64) differs from offerings[0] S5.MEDIUM4 (2 vCPU, 4 GiB, amd64): the types of one template must have one shape" ||
		body.Details.Errors[1].Field != "offerings[2].instanceType" || body.Details.Errors[1].Message != "S5.MEDIUM4 is not offered in ap-guangzhou-6" {
		t.Errorf("422 body %s", w.Body)
	}
	if asked := questions(); len(asked) != 1 || asked[0].GetTarget().GetRegion() != "ap-guangzhou" || strings.Join(asked[0].GetZones(), ",") != "ap-guangzhou-3,ap-guangzhou-4,ap-guangzhou-6" ||
		strings.Join(asked[0].GetInstanceTypes(), ",") != "S5.MEDIUM4,SR1.MEDIUM4" {
		t.Errorf("asked %v", questions())
	}

	// A group defining its template: the fields are under instanceTemplate;
	// a group naming a catalog template asks nothing.
	n := len(questions())
	w = rest.CheckGroupOfferingShapes(ask, &domain.NodeGroup{ID: "g", InstanceTemplate: tmpl})
	if w.Code != http.StatusUnprocessableEntity || !strings.Contains(w.Body.String(), `"field": "instanceTemplate.offerings[1].instanceType"`) || len(questions()) != n+1 {
		t.Errorf("group with mixed offerings: %d %s", w.Code, w.Body)
	}
	named := &domain.InstanceTemplate{Name: "web", Offerings: tmpl.Offerings}
	if w := rest.CheckGroupOfferingShapes(ask, &domain.NodeGroup{ID: "g", InstanceTemplate: named}); w.Code != http.StatusOK || len(questions()) != n+1 {
		t.Errorf("group naming a template: %d, %d questions", w.Code, len(questions())-n-1)
	}

	good := *tmpl
	good.Offerings = []domain.Offering{{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4"}, {Zone: "ap-guangzhou-4", InstanceType: "SA2.MEDIUM4"}}
	if w := rest.CheckOfferingShapes(ask, &good); w.Code != http.StatusOK || w.Header().Get("Warning") != "" {
		t.Errorf("one shape: %d, Warning %q: %s", w.Code, w.Header().Get("Warning"), w.Body)
	}

	for account, why := range map[string]string{
		"alibaba": `this cloud's adapter cannot tell instance shapes (alibaba cloud instance shapes: not supported by this cloud)"`,
		"broken":  `the cloud could not be asked: AuthFailure.SecretIdNotFound: no such key"`,
		"slow":    `no cloud adapter answered in time"`,
	} {
		acct := good
		acct.Account = account
		start := time.Now()
		w := rest.CheckOfferingShapes(ask, &acct)
		if w.Code != http.StatusOK || w.Header().Get("Warning") != warnPrefix+why {
			t.Errorf("account %s: %d, Warning %q", account, w.Code, w.Header().Get("Warning"))
		}
		if d := time.Since(start); d > cloudshapes.Timeout+2*time.Second {
			t.Errorf("account %s: answered after %v", account, d)
		}
	}

	// Without offerings nothing is asked.
	n = len(questions())
	plain := good
	plain.Offerings = nil
	if w := rest.CheckOfferingShapes(ask, &plain); w.Code != http.StatusOK || w.Header().Get("Warning") != "" || len(questions()) != n {
		t.Errorf("no offerings: %d, Warning %q, %d questions", w.Code, w.Header().Get("Warning"), len(questions())-n)
	}
	if w := rest.CheckOfferingShapes(func(context.Context, cloudshapes.Target, []string, []string) ([]cloudspec.Shape, error) {
		return nil, errors.New("unused")
	}, &plain); w.Code != http.StatusOK {
		t.Errorf("no offerings, failing Ask: %d", w.Code)
	}
}

// A template without a region is asked about in its account's first
// region, where lifecycle creates its VMs.
func TestTemplateOfferingShapesRegionFromAccount(t *testing.T) {
	rm := app.NewReadModel()
	rm.PutCatalog("accounts.prod", 1, &domain.CatalogEntry{Account: &domain.CloudAccount{Name: "prod", Provider: "tencentcloud", Regions: []string{"ap-shanghai", "ap-guangzhou"}}})
	rm.MarkSynced(app.BucketCatalog, nil)
	svc := app.NewService(rm, &natsreq.Fake{}, app.Config{OpTimeout: time.Second}, nil)
	var got cloudshapes.Target
	ask := func(_ context.Context, tg cloudshapes.Target, _, _ []string) ([]cloudspec.Shape, error) {
		got = tg
		return nil, nil
	}
	tmpl := &domain.InstanceTemplate{Name: "web", Provider: "tencentcloud", Account: "prod", Offerings: []domain.Offering{{Zone: "ap-shanghai-2", InstanceType: "S5.MEDIUM4"}}}
	w := rest.CheckOfferingShapesWith(svc, ask, tmpl)
	if want := (cloudshapes.Target{Provider: "tencentcloud", Account: "prod", Region: "ap-shanghai"}); got != want {
		t.Errorf("asked about %+v, want %+v", got, want)
	}
	if w.Code != http.StatusUnprocessableEntity || !strings.Contains(w.Body.String(), "S5.MEDIUM4 is not offered in ap-shanghai-2") {
		t.Errorf("nothing offered: %d %s", w.Code, w.Body)
	}
}
