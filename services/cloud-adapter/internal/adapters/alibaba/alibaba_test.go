package alibaba

// These tests drive the official SDK, through the adapter, against an
// httptest server answering as ECS does (JSON bodies, error codes with
// HTTP statuses), so the SDK's request encoding and error parsing are
// part of what is tested.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ecs "github.com/alibabacloud-go/ecs-20140526/v7/client"

	"github.com/nodesmith/nodesmith/libs/backoff"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/adaptertest"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports/cloudtest"
)

const template = `{"InstanceType":"ecs.g7.large","ImageId":"m-test","ZoneId":"cn-hangzhou-h","VSwitchId":"vsw-1","SecurityGroupId":"sg-1",
"SystemDisk":{"Category":"cloud_essd","Size":"40"}}`

var target = ports.Target{Account: "acct", Region: "cn-hangzhou"}

// call is one request the fake ECS received.
type call struct {
	action string
	params map[string]string
	header http.Header
}

// fakeECS answers ECS actions with handlers; a handler returns the status
// and the JSON body.
type fakeECS struct {
	mu       sync.Mutex
	calls    []call
	handlers map[string]func(p map[string]string) (int, any)
}

func (f *fakeECS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p := map[string]string{}
	for k, v := range r.Form {
		p[k] = v[0]
	}
	action := r.Header.Get("x-acs-action")
	f.mu.Lock()
	f.calls = append(f.calls, call{action: action, params: p, header: r.Header.Clone()})
	h := f.handlers[action]
	f.mu.Unlock()
	status, body := http.StatusNotFound, any(map[string]string{"Code": "InvalidAction.NotFound", "Message": "no such action"})
	if h != nil {
		status, body = h(p)
	}
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func (f *fakeECS) on(action string, h func(p map[string]string) (int, any)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handlers[action] = h
}

func (f *fakeECS) callsOf(action string) []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []call
	for _, c := range f.calls {
		if c.action == action {
			out = append(out, c)
		}
	}
	return out
}

func ecsError(status int, code string) func(map[string]string) (int, any) {
	return func(map[string]string) (int, any) {
		return status, map[string]string{"Code": code, "Message": "injected " + code, "RequestId": "req-1"}
	}
}

type opts struct {
	creds *cloudtest.Creds
	retry backoff.Policy
}

func newCloud(t *testing.T, o opts) (*Cloud, *fakeECS) {
	t.Helper()
	f := &fakeECS{handlers: map[string]func(map[string]string) (int, any){}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	if o.creds == nil {
		o.creds = cloudtest.NewCreds(map[string]ports.Credential{"acct": {KeyID: "LTAItest", Secret: "secret"}})
	}
	if o.retry.Attempts == 0 {
		o.retry = backoff.Policy{Initial: time.Millisecond, Max: 5 * time.Millisecond, Attempts: 4}
	}
	clients := NewClients(ClientOptions{Credentials: o.creds, Endpoint: strings.TrimPrefix(srv.URL, "http://"), Scheme: "http", Timeout: 5 * time.Second})
	return New(Options{Clients: clients.Get, Settings: adaptertest.Settings(nil, o.retry)}), f
}

func runOK(p map[string]string) (int, any) {
	n, _ := strconv.Atoi(p["Amount"])
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("i-%s-%d", p["ClientToken"], i)
	}
	return 200, map[string]any{"RequestId": "r", "InstanceIdSets": map[string]any{"InstanceIdSet": ids}}
}

func TestCreateBatchSendsTemplateTokenAmountAndTags(t *testing.T) {
	c, f := newCloud(t, opts{})
	f.on(ActionRunInstances, runOK)
	ids, err := c.CreateBatch(context.Background(), ports.CreateRequest{
		Target: target, ClientToken: "tok-1", Template: "small", Parameters: template, Count: 3,
		Tags: domain.CreationTags("c1", "g1", "b1", ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []string{"i-tok-1-0", "i-tok-1-1", "i-tok-1-2"}) {
		t.Fatalf("ids = %v", ids)
	}
	calls := f.callsOf(ActionRunInstances)
	if len(calls) != 1 {
		t.Fatalf("%d RunInstances calls, want 1", len(calls))
	}
	p := calls[0].params
	for k, want := range map[string]string{
		"Amount": "3", "ClientToken": "tok-1", "RegionId": "cn-hangzhou", "InstanceType": "ecs.g7.large",
		"ZoneId": "cn-hangzhou-h", "VSwitchId": "vsw-1",
		"SystemDisk.Category": "cloud_essd", "SystemDisk.Size": "40",
		"Tag.1.Key": domain.TagCluster, "Tag.1.Value": "c1",
		"Tag.2.Key": domain.TagGroup, "Tag.3.Key": domain.TagBatch, "Tag.3.Value": "b1",
	} {
		if p[k] != want {
			t.Errorf("%s = %q, want %q (params %v)", k, p[k], want, p)
		}
	}
	if _, ok := p["Tag.4.Key"]; ok {
		t.Error("more tags than nodesmith's")
	}
	if !strings.HasPrefix(calls[0].header.Get("Authorization"), "ACS3-HMAC-SHA256 Credential=LTAItest,") {
		t.Errorf("Authorization = %q, want an ACS3 signature with the account's AccessKey id", calls[0].header.Get("Authorization"))
	}
}

func TestCreateBatchRejectsBadInputWithoutACall(t *testing.T) {
	c, f := newCloud(t, opts{})
	f.on(ActionRunInstances, runOK)
	for name, req := range map[string]ports.CreateRequest{
		"unknown field":    {Parameters: `{"InstanceTyp":"x"}`, Count: 1, ClientToken: "t"},
		"not json":         {Parameters: `{`, Count: 1, ClientToken: "t"},
		"no token":         {Parameters: template, Count: 1},
		"count 0":          {Parameters: template, Count: 0, ClientToken: "t"},
		"count 101":        {Parameters: template, Count: 101, ClientToken: "t"},
		"tags in template": {Parameters: strings.Replace(template, "{", `{"Tag":[{"Key":"k","Value":"v"}],`, 1), Count: 1, ClientToken: "t"},
		"min amount":       {Parameters: strings.Replace(template, "{", `{"MinAmount":1,`, 1), Count: 1, ClientToken: "t"},
		"no zone":          {Parameters: strings.Replace(template, `"ZoneId":"cn-hangzhou-h",`, "", 1), Count: 1, ClientToken: "t"},
		"wrong type":       {Parameters: strings.Replace(template, `"Size":"40"`, `"Size":40`, 1), Count: 1, ClientToken: "t"},
	} {
		req.Target = target
		req.Tags = domain.CreationTags("c1", "g1", "b1", "")
		_, err := c.CreateBatch(context.Background(), req)
		if !ports.IsInvalidParametersError(err) {
			t.Errorf("%s: CreateBatch = %v, want invalid parameters", name, err)
		}
	}
	if n := len(f.callsOf(ActionRunInstances)); n != 0 {
		t.Fatalf("%d RunInstances calls for rejected input", n)
	}
}

func TestErrorCodesMapToKindsAndOnlyRetryableAreRetried(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
		want   ports.ErrorKind
	}{
		{400, "Throttling.User", ports.ErrorKindThrottled},
		{400, "Throttling", ports.ErrorKindThrottled},
		{403, "OperationDenied.NoStock", ports.ErrorKindCapacity},
		{400, "InvalidResourceType.NotSupported", ports.ErrorKindCapacity},
		{403, "QuotaExceed.ElasticQuota", ports.ErrorKindCapacity},
		{403, "Zone.NotOnSale", ports.ErrorKindCapacity},
		{404, "InvalidAccessKeyId.NotFound", ports.ErrorKindAuth},
		{400, "SignatureDoesNotMatch", ports.ErrorKindAuth},
		{403, "Forbidden.RAM", ports.ErrorKindAuth},
		{400, "InvalidParameter", ports.ErrorKindInvalidParameters},
		{400, "InvalidParameter.Conflict", ports.ErrorKindInvalidParameters},
		{400, "MissingParameter", ports.ErrorKindInvalidParameters},
		{400, "InvalidInstanceType.ValueNotSupported", ports.ErrorKindInvalidParameters},
		{503, "ServiceUnavailable", ports.ErrorKindTransient},
		{500, "InternalError", ports.ErrorKindTransient},
		{502, "SomethingNew", ports.ErrorKindTransient},
		{400, "SomethingNew", ports.ErrorKindUnknown},
	} {
		t.Run(tc.code+"/"+strconv.Itoa(tc.status), func(t *testing.T) {
			c, f := newCloud(t, opts{})
			f.on(ActionRunInstances, ecsError(tc.status, tc.code))
			_, err := c.CreateBatch(context.Background(), ports.CreateRequest{Target: target, ClientToken: "t", Parameters: template, Count: 1})
			ce, ok := ports.AsCloudError(err)
			if !ok || ce.Kind != tc.want || ce.Code != tc.code {
				t.Fatalf("CreateBatch = %v, want %s (%s)", err, tc.code, tc.want)
			}
			if !strings.Contains(ce.Message, "req-1") {
				t.Errorf("message %q lacks the request id", ce.Message)
			}
			wantCalls := 1
			if ports.IsRetryable(err) {
				wantCalls = 4
			}
			if n := len(f.callsOf(ActionRunInstances)); n != wantCalls {
				t.Fatalf("%d calls, want %d", n, wantCalls)
			}
		})
	}
}

// TestRetryKeepsClientToken: a lost answer is retried with the same
// ClientToken, so ECS returns the first call's VMs.
func TestRetryKeepsClientToken(t *testing.T) {
	c, f := newCloud(t, opts{})
	n := 0
	f.on(ActionRunInstances, func(p map[string]string) (int, any) {
		n++
		if n == 1 {
			return 503, map[string]string{"Code": "ServiceUnavailable"}
		}
		return runOK(p)
	})
	if _, err := c.CreateBatch(context.Background(), ports.CreateRequest{Target: target, ClientToken: "tok-x", Parameters: template, Count: 2}); err != nil {
		t.Fatal(err)
	}
	calls := f.callsOf(ActionRunInstances)
	if len(calls) != 2 || calls[0].params["ClientToken"] != "tok-x" || calls[1].params["ClientToken"] != "tok-x" {
		t.Fatalf("calls %+v, want two with ClientToken tok-x", calls)
	}
}

func instance(id, status, ip string, tags map[string]string) map[string]any {
	var ts []map[string]string
	for k, v := range tags {
		ts = append(ts, map[string]string{"TagKey": k, "TagValue": v})
	}
	return map[string]any{
		"InstanceId": id, "Status": status, "ZoneId": "cn-hangzhou-h", "CreationTime": "2026-11-26T01:02Z",
		"VpcAttributes": map[string]any{"PrivateIpAddress": map[string]any{"IpAddress": []string{ip}}},
		"Tags":          map[string]any{"Tag": ts},
	}
}

func TestDescribeMapsInstances(t *testing.T) {
	c, f := newCloud(t, opts{})
	f.on(ActionDescribeInstances, func(p map[string]string) (int, any) {
		var ids []string
		if err := json.Unmarshal([]byte(p["InstanceIds"]), &ids); err != nil || len(ids) != 4 {
			return 400, map[string]string{"Code": "InvalidParameter", "Message": "InstanceIds " + p["InstanceIds"]}
		}
		return 200, map[string]any{"Instances": map[string]any{"Instance": []any{
			instance("i-1", "Running", "10.0.0.1", map[string]string{domain.TagInstance: "n1"}),
			instance("i-2", "Pending", "", nil),
			instance("i-3", "Stopped", "10.0.0.3", nil),
			instance("i-4", "Stopping", "10.0.0.4", nil),
		}}}
	})
	sts, err := c.Describe(context.Background(), target, []string{"i-1", "i-2", "i-3", "i-4"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 4 {
		t.Fatalf("got %d statuses", len(sts))
	}
	want := time.Date(2026, 11, 26, 1, 2, 0, 0, time.UTC)
	if s := sts[0]; s.CloudID != "i-1" || s.State != domain.StateRunning || s.PrivateIP != "10.0.0.1" || s.Zone != "cn-hangzhou-h" ||
		!s.CreatedAt.Equal(want) || s.Tags[domain.TagInstance] != "n1" {
		t.Fatalf("status %+v", s)
	}
	if sts[1].State != domain.StatePending || sts[2].State != domain.StateStopped || sts[3].State != domain.StateTerminating {
		t.Fatalf("states %s %s %s", sts[1].State, sts[2].State, sts[3].State)
	}
	if p := f.callsOf(ActionDescribeInstances)[0].params; p["RegionId"] != "cn-hangzhou" {
		t.Fatalf("RegionId %q", p["RegionId"])
	}
}

// TestTerminateAlreadyGone: DeleteInstances refuses a set with a gone VM;
// the adapter deletes the rest and counts the gone one as done.
func TestTerminateAlreadyGone(t *testing.T) {
	c, f := newCloud(t, opts{})
	alive := map[string]bool{"i-1": true, "i-3": true}
	var mu sync.Mutex
	f.on(ActionDeleteInstances, func(p map[string]string) (int, any) {
		mu.Lock()
		defer mu.Unlock()
		if p["Force"] != "true" {
			return 400, map[string]string{"Code": "IncorrectInstanceStatus"}
		}
		var ids []string
		for i := 1; p["InstanceId."+strconv.Itoa(i)] != ""; i++ {
			ids = append(ids, p["InstanceId."+strconv.Itoa(i)])
		}
		for _, id := range ids {
			if !alive[id] {
				return 404, map[string]string{"Code": "InvalidInstanceId.NotFound"}
			}
		}
		for _, id := range ids {
			delete(alive, id)
		}
		return 200, map[string]string{"RequestId": "r"}
	})
	f.on(ActionDescribeInstances, func(map[string]string) (int, any) {
		mu.Lock()
		defer mu.Unlock()
		var ins []any
		for id := range alive {
			ins = append(ins, instance(id, "Running", "10.0.0.1", nil))
		}
		return 200, map[string]any{"Instances": map[string]any{"Instance": ins}}
	})
	if err := c.Terminate(context.Background(), target, []string{"i-1", "i-2", "i-3"}); err != nil {
		t.Fatal(err)
	}
	if len(alive) != 0 {
		t.Fatalf("still alive: %v", alive)
	}
	if err := c.Terminate(context.Background(), target, []string{"i-1", "i-2", "i-3"}); err != nil {
		t.Fatalf("terminating gone VMs again: %v", err)
	}
	if err := c.Terminate(context.Background(), target, make([]string, 101)); !ports.IsInvalidParametersError(err) {
		t.Fatalf("101 ids: %v", err)
	}
}

func TestListByTagPagesByNextTokenAndKeepsOnlyTheCluster(t *testing.T) {
	c, f := newCloud(t, opts{})
	var all []any
	for i := range 250 {
		all = append(all, instance(fmt.Sprintf("i-%03d", i), "Running", "10.0.0.1", map[string]string{domain.TagCluster: "c1"}))
	}
	all = append(all, instance("i-other", "Running", "10.0.0.9", map[string]string{domain.TagCluster: "c2"}))
	f.on(ActionDescribeInstances, func(p map[string]string) (int, any) {
		if p["Tag.1.Key"] != domain.TagCluster || p["Tag.1.Value"] != "c1" || p["MaxResults"] != "100" {
			return 400, map[string]string{"Code": "InvalidParameter", "Message": fmt.Sprint(p)}
		}
		off, _ := strconv.Atoi(p["NextToken"])
		end := min(off+100, len(all))
		next := ""
		if end < len(all) {
			next = strconv.Itoa(end)
		}
		return 200, map[string]any{"NextToken": next, "Instances": map[string]any{"Instance": all[off:end]}}
	})
	sts, err := c.ListByTag(context.Background(), target, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 250 {
		t.Fatalf("listed %d, want the 250 of c1", len(sts))
	}
	if n := len(f.callsOf(ActionDescribeInstances)); n != 3 {
		t.Fatalf("%d pages, want 3", n)
	}
	f.on(ActionDescribeInstances, func(map[string]string) (int, any) {
		return 200, map[string]any{"NextToken": "same", "Instances": map[string]any{}}
	})
	if _, err := c.ListByTag(context.Background(), target, "c1"); !ports.IsTransientError(err) {
		t.Fatalf("a stuck cursor = %v, want transient", err)
	}
}

func TestCredentialsSTSAndRotation(t *testing.T) {
	cr := cloudtest.NewCreds(map[string]ports.Credential{"acct": {KeyID: "STS.id", Secret: "s", SecurityToken: "sts-token"}})
	c, f := newCloud(t, opts{creds: cr})
	f.on(ActionDescribeInstances, func(map[string]string) (int, any) { return 200, map[string]any{} })
	if _, err := c.Describe(context.Background(), target, []string{"i-1"}); err != nil {
		t.Fatal(err)
	}
	cr.Set("acct", ports.Credential{KeyID: "LTAInew", Secret: "s2"})
	if _, err := c.Describe(context.Background(), target, []string{"i-1"}); err != nil {
		t.Fatal(err)
	}
	calls := f.callsOf(ActionDescribeInstances)
	if h := calls[0].header; h.Get("x-acs-security-token") != "sts-token" || !strings.Contains(h.Get("Authorization"), "Credential=STS.id,") {
		t.Fatalf("STS call headers %v", h)
	}
	if h := calls[1].header; h.Get("x-acs-security-token") != "" || !strings.Contains(h.Get("Authorization"), "Credential=LTAInew,") {
		t.Fatalf("rotated key not used: %v", h)
	}
	_, err := c.Describe(context.Background(), ports.Target{Account: "nobody", Region: "cn-hangzhou"}, []string{"i-1"})
	if !ports.IsAuthError(err) {
		t.Fatalf("unknown account = %v, want auth", err)
	}
}

func TestCancelledCallerGetsContextError(t *testing.T) {
	c, f := newCloud(t, opts{})
	f.on(ActionDescribeInstances, ecsError(503, "ServiceUnavailable"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Describe(ctx, target, []string{"i-1"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Describe = %v, want context.Canceled", err)
	}
}

// TestConcurrentCallsAreSafe: the SDK client is not safe for concurrent
// use; the adapter's calls on one account and region run at once (-race
// checks them).
func TestConcurrentCallsAreSafe(t *testing.T) {
	c, f := newCloud(t, opts{})
	f.on(ActionRunInstances, runOK)
	f.on(ActionDescribeInstances, func(map[string]string) (int, any) { return 200, map[string]any{} })
	f.on(ActionDeleteInstances, func(map[string]string) (int, any) { return 200, map[string]any{} })
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			ctx := context.Background()
			if _, err := c.CreateBatch(ctx, ports.CreateRequest{Target: target, ClientToken: fmt.Sprintf("t%d", i), Parameters: template, Count: 1}); err != nil {
				t.Error(err)
			}
			if _, err := c.Describe(ctx, target, []string{"i-1"}); err != nil {
				t.Error(err)
			}
			if err := c.Terminate(ctx, target, []string{"i-1"}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

// TestTagChunksByTheAPILimits: 60 instances and 21 tags are 2 x 2 calls of
// at most 50 instances and 20 tags.
func TestTagChunksByTheAPILimits(t *testing.T) {
	c, f := newCloud(t, opts{})
	f.on(ActionTagResources, func(p map[string]string) (int, any) {
		if p["ResourceType"] != "instance" || p["RegionId"] != "cn-hangzhou" {
			return 400, map[string]string{"Code": "InvalidParameter"}
		}
		return 200, map[string]string{"RequestId": "r"}
	})
	ids := make([]string, 60)
	for i := range ids {
		ids[i] = fmt.Sprintf("i-%d", i)
	}
	var tags []domain.Tag
	for i := range 21 {
		tags = append(tags, domain.Tag{Key: fmt.Sprintf("k%d", i), Value: "v"})
	}
	if err := c.Tag(context.Background(), target, ids, tags); err != nil {
		t.Fatal(err)
	}
	calls := f.callsOf(ActionTagResources)
	if len(calls) != 4 {
		t.Fatalf("%d TagResources calls, want 4", len(calls))
	}
	p := calls[0].params
	if p["ResourceId.50"] != "i-49" || p["ResourceId.51"] != "" || p["Tag.20.Key"] != "k19" || p["Tag.21.Key"] != "" {
		t.Fatalf("first call params %v", p)
	}
	if p := calls[3].params; p["ResourceId.10"] != "i-59" || p["Tag.1.Key"] != "k20" {
		t.Fatalf("last call params %v", p)
	}
	f.on(ActionTagResources, ecsError(404, "InvalidResourceId.NotFound"))
	if err := c.Tag(context.Background(), target, ids[:1], tags[:1]); !ports.IsNotFoundError(err) {
		t.Fatalf("missing instance: %v", err)
	}
}

// TestCloudspecMatchesTheSDK: the template rules the API accepts
// (libs/cloudspec) are the shape of the request this adapter decodes
// templates into, or a template the API accepted would fail at create time
// (or a valid one be refused).
func TestCloudspecMatchesTheSDK(t *testing.T) {
	adaptertest.SpecMatchesSDK(t, Provider, reflect.TypeFor[ecs.RunInstancesRequest](), reflect.TypeFor[ecs.DescribeInstancesRequest]())
}
