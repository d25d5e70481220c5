package rest_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/natsreq"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/rest"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// offeringsFixture is a fixture whose service reads the clock c, seeded
// with a group "spot" with three offerings (the first marked until
// 08:03) and the usual group "web" (no offerings).
func offeringsFixture(t *testing.T) (*fixture, *clock) {
	t.Helper()
	c := &clock{now: time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)}
	f := &fixture{rm: app.NewReadModel(), lc: &natsreq.Fake{}}
	svc := app.NewService(f.rm, f.lc, app.Config{OpTimeout: 2 * time.Second, Now: c.Now}, nil)
	auth, err := rest.NewAuthenticator(rest.TokenConfig{AdminTokens: []string{adminToken}, ReadOnlyTokens: []string{readOnlyToken}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.h = rest.NewHandler(svc, auth, rest.Options{})
	f.seed()
	f.rev++
	f.rm.PutGroup("spot", f.rev, &domain.NodeGroup{ID: "spot", MaxSize: 5, InstanceTemplate: &domain.InstanceTemplate{
		Name: "sp", Provider: "tencentcloud", Account: "prod", Region: "ap-guangzhou", Zone: "gz-3", InstanceType: "S5.LARGE8",
		ParametersJSON: `{"LoginSettings":{"Password":"p4ssw0rd"}}`,
		Offerings: []domain.Offering{
			{Zone: "gz-3", InstanceType: "S5.LARGE8"},
			{Zone: "gz-4", SubnetID: "subnet-4", InstanceType: "S5.LARGE8", CapacityType: "spot"},
			{Zone: "gz-6", InstanceType: "S5.LARGE8"},
		},
	}})
	f.rm.PutOffering("k3", 1, &domain.OfferingMark{
		Ref: domain.OfferingRef{Provider: "tencentcloud", Account: "prod", Region: "ap-guangzhou", Zone: "gz-3", InstanceType: "S5.LARGE8", CapacityType: "on-demand"},
		At:  c.Now(), Until: c.Now().Add(3 * time.Minute), Code: "ResourceInsufficient.SpecifiedInstanceType", Message: "sold out",
	})
	return f, c
}

// The group view carries the template's offerings: in order, capacity
// resolved (the template has none: on-demand), the marked one with until
// and reason; a group without offerings has no offerings key. The list
// view shows the same. Once the clock passes until, it is available.
func TestGroupViewShowsOfferings(t *testing.T) {
	f, c := offeringsFixture(t)
	get := func(path string) map[string]json.RawMessage {
		t.Helper()
		r := f.do(t, call{method: "GET", path: path, token: readOnlyToken})
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		if strings.Contains(string(r.body), "p4ssw0rd") {
			t.Fatalf("GET %s shows the template parameters", path)
		}
		var out map[string]json.RawMessage
		if err := json.Unmarshal(r.body, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := `{"strategy":"priority","items":[` +
		`{"zone":"gz-3","instanceType":"S5.LARGE8","capacityType":"on-demand","available":false,"unavailableUntil":"2026-11-26T08:03:00Z","reason":{"code":"ResourceInsufficient.SpecifiedInstanceType","message":"sold out"}},` +
		`{"zone":"gz-4","subnetId":"subnet-4","instanceType":"S5.LARGE8","capacityType":"spot","available":true},` +
		`{"zone":"gz-6","instanceType":"S5.LARGE8","capacityType":"on-demand","available":true}]}`
	if got := compact(t, get("/api/v1/nodegroups/spot")["offerings"]); got != want {
		t.Errorf("offerings:\n got %s\nwant %s", got, want)
	}
	if _, ok := get("/api/v1/nodegroups/web")["offerings"]; ok {
		t.Error("a group without offerings shows an offerings key")
	}
	var list struct {
		Items []map[string]json.RawMessage `json:"items"`
	}
	raw, _ := json.Marshal(get("/api/v1/nodegroups"))
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range list.Items {
		if string(g["id"]) == `"spot"` {
			found = true
			if compact(t, g["offerings"]) != want {
				t.Errorf("list offerings: %s", g["offerings"])
			}
		}
	}
	if !found {
		t.Error("the list lacks group spot")
	}

	c.Add(3 * time.Minute)
	if got := compact(t, get("/api/v1/nodegroups/spot")["offerings"]); !strings.Contains(got, `{"zone":"gz-3","instanceType":"S5.LARGE8","capacityType":"on-demand","available":true}`) {
		t.Errorf("after until: %s", got)
	}
}

// GET /offerings/unavailable lists the live marks for any token (503
// until the bucket is loaded), never an expired one, and is read-only.
func TestUnavailableOfferings(t *testing.T) {
	f, c := offeringsFixture(t)
	r := f.do(t, call{method: "GET", path: "/api/v1/offerings/unavailable", token: readOnlyToken})
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("before the offerings bucket is loaded: %d %s", r.status, r.body)
	}
	errorBody(t, r)
	f.rm.MarkSynced(app.BucketOfferings, nil)

	r = f.do(t, call{method: "GET", path: "/api/v1/offerings/unavailable", token: readOnlyToken})
	want := `{"items":[{"provider":"tencentcloud","account":"prod","region":"ap-guangzhou","zone":"gz-3","instanceType":"S5.LARGE8","capacityType":"on-demand",` +
		`"at":"2026-11-26T08:00:00Z","until":"2026-11-26T08:03:00Z","reason":{"code":"ResourceInsufficient.SpecifiedInstanceType","message":"sold out"}}]}`
	if r.status != http.StatusOK || compact(t, r.body) != want {
		t.Errorf("unavailable: %d\n got %s\nwant %s", r.status, r.body, want)
	}

	for _, c := range []call{
		{method: "GET", path: "/api/v1/offerings/unavailable"},
		{method: "POST", path: "/api/v1/offerings/unavailable", token: readOnlyToken, body: "{}"},
		{method: "DELETE", path: "/api/v1/offerings/unavailable", token: adminToken},
	} {
		if r := f.do(t, c); r.status != map[string]int{"GET": 401, "POST": 403, "DELETE": 405}[c.method] {
			t.Errorf("%s %s (token %q): %d", c.method, c.path, c.token, r.status)
		}
	}

	c.Add(3 * time.Minute)
	r = f.do(t, call{method: "GET", path: "/api/v1/offerings/unavailable", token: readOnlyToken})
	if r.status != http.StatusOK || compact(t, r.body) != `{"items":[]}` {
		t.Errorf("after until: %d %s", r.status, r.body)
	}
}

func compact(t *testing.T, b []byte) string {
	t.Helper()
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return out.String()
}
