package cvmemu

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ecs "github.com/alibabacloud-go/ecs-20140526/v7/client"
	"github.com/alibabacloud-go/tea/dara"

	"github.com/nodesmith/nodesmith/tools/simcluster"
)

func TestECSClientTokenIdempotency(t *testing.T) {
	s := startECS(t, testConfig())
	c := ecsClient(t, s, testSecretID, testKey)

	first, err := ecsRun(c, ecsRunOpts{amount: 2, token: "tok-1"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := ecsRun(c, ecsRunOpts{amount: 2, token: "tok-1"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(first, again) {
		t.Fatalf("retry with the same ClientToken answered %v, want %v", again, first)
	}
	// The same token with other parameters is refused, not replayed.
	_, err = ecsRun(c, ecsRunOpts{amount: 3, token: "tok-1"})
	wantECSErr(t, err, ECSCodeIdempotentMismatch, http.StatusBadRequest)
	_, err = ecsRun(c, ecsRunOpts{amount: 2, token: "tok-1", tags: map[string]string{"k": "v"}})
	wantECSErr(t, err, ECSCodeIdempotentMismatch, http.StatusBadRequest)

	st := s.Stats()
	if st.VMsCreated != 2 || st.ClientTokenCreations["acct1/ecs:tok-1"] != 1 || st.ClientTokenReplays["acct1/ecs:tok-1"] != 1 {
		t.Fatalf("stats: created %d, creations %v, replays %v", st.VMsCreated, st.ClientTokenCreations, st.ClientTokenReplays)
	}
	// Tokens are per account.
	other, err := ecsRun(ecsClient(t, s, "AKIDother", "other-key"), ecsRunOpts{amount: 2, token: "tok-1"})
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(other, func(id string) bool { return slices.Contains(first, id) }) {
		t.Fatal("another account's ClientToken answered the first account's instances")
	}
}

func TestECSFaultKnobs(t *testing.T) {
	s := startECS(t, testConfig())
	c := ecsClient(t, s, testSecretID, testKey)

	t.Run("rate limit", func(t *testing.T) {
		s.SetRateLimit(ActionDescribeInstances, 0.001) // a burst of one, then nothing for 1000s
		defer s.SetRateLimit(ActionDescribeInstances, 0)
		if _, err := ecsDescribe(c, nil); err != nil {
			t.Fatal(err)
		}
		_, err := ecsDescribe(c, nil)
		wantECSErr(t, err, ECSCodeThrottling, http.StatusBadRequest)
		// The time until the next token is in the gateway's
		// x-ratelimit-user-api header (the SDK's ThrottlingError.RetryAfter):
		// about 1000s at this rate.
		_, header, out := ecsRaw(t, s, http.MethodGet, "Action=DescribeInstances&Version=2014-05-26&RegionId="+ecsRegion, "")
		h := header.Get("x-ratelimit-user-api")
		var limit float64
		var left, reset int64
		if _, err := fmt.Sscanf(h, "Limit:%g,Remain:0,TimeLeft:%d,Reset:%d", &limit, &left, &reset); err != nil ||
			out["Code"] != ECSCodeThrottling || left < 900_000 || left > 1_000_000 {
			t.Errorf("throttled answer: %v, x-ratelimit-user-api %q (%v)", out, h, err)
		}
		if got := s.Stats().Throttled[ActionDescribeInstances]; got != 2 {
			t.Errorf("Throttled = %d, want 2", got)
		}
	})
	t.Run("stock-out", func(t *testing.T) {
		s.SetStockOuts([]StockOut{
			{Zone: ecsZone, InstanceType: ecsType},
			{InstanceType: "ecs.gn7.xlarge", Code: ECSCodeResourceNotSupported},
		})
		defer s.SetStockOuts(nil)
		_, err := ecsRun(c, ecsRunOpts{})
		wantECSErr(t, err, ECSCodeNoStock, http.StatusForbidden)
		_, err = ecsRun(c, ecsRunOpts{typ: "ecs.gn7.xlarge", zone: "cn-hangzhou-i"})
		wantECSErr(t, err, ECSCodeResourceNotSupported, http.StatusForbidden)
		// Other zones still have the type.
		ids, err := ecsRun(c, ecsRunOpts{zone: "cn-hangzhou-i"})
		if err != nil {
			t.Fatal(err)
		}
		cleanup(t, c, ids)
	})
	t.Run("quota", func(t *testing.T) {
		s.SetQuota(Quota{MaxInstancesPerZone: 1})
		defer s.SetQuota(Quota{})
		ids, err := ecsRun(c, ecsRunOpts{})
		if err != nil {
			t.Fatal(err)
		}
		defer cleanup(t, c, ids)
		_, err = ecsRun(c, ecsRunOpts{})
		wantECSErr(t, err, ECSCodeQuota, http.StatusForbidden)
	})
	t.Run("boot delay", func(t *testing.T) {
		s.SetBootDelay(time.Hour)
		defer s.SetBootDelay(50 * time.Millisecond)
		ids, err := ecsRun(c, ecsRunOpts{})
		if err != nil {
			t.Fatal(err)
		}
		defer cleanup(t, c, ids)
		insts, err := ecsDescribe(c, ids)
		if err != nil {
			t.Fatal(err)
		}
		if st := dara.StringValue(insts[0].Status); st != ECSStatusPending {
			t.Fatalf("status during the boot delay = %s, want Pending", st)
		}
		// A Pending instance is not Stopped: deleting it needs Force.
		wantECSErr(t, ecsDelete(c, false, ids...), ECSCodeIncorrectStatus, http.StatusForbidden)
	})
	t.Run("launch failure", func(t *testing.T) {
		s.SetLaunchPolicy(LaunchPolicy{FailInstanceTypes: []string{"ecs.c6.large"}})
		defer s.SetLaunchPolicy(LaunchPolicy{})
		ids, err := ecsRun(c, ecsRunOpts{typ: "ecs.c6.large"})
		if err != nil {
			t.Fatal(err)
		}
		ecsWaitStatus(t, c, ids, ECSStatusStopped)
		// A Stopped instance is deleted without Force.
		if err := ecsDelete(c, false, ids...); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("injected before commit", func(t *testing.T) {
		before := s.Stats().VMsCreated
		s.InjectFaults(ActionRunInstances, Fault{}, Fault{Code: ECSCodeServiceUnavailable}, Fault{Code: "Custom", HTTPStatus: 502})
		_, err := ecsRun(c, ecsRunOpts{})
		wantECSErr(t, err, CodeInternalError, http.StatusInternalServerError)
		_, err = ecsRun(c, ecsRunOpts{})
		wantECSErr(t, err, ECSCodeServiceUnavailable, http.StatusServiceUnavailable)
		_, err = ecsRun(c, ecsRunOpts{})
		wantECSErr(t, err, "Custom", http.StatusBadGateway)
		if got := s.Stats().VMsCreated; got != before {
			t.Fatalf("faults before commit created %d VMs", got-before)
		}
	})
	t.Run("injected after commit", func(t *testing.T) {
		before := s.Stats().VMsCreated
		s.InjectFaults(ActionRunInstances, Fault{AfterCommit: true})
		_, err := ecsRun(c, ecsRunOpts{token: "after-commit"})
		wantECSErr(t, err, CodeInternalError, http.StatusInternalServerError)
		if got := s.Stats().VMsCreated; got != before+1 {
			t.Fatalf("a fault after commit must keep the VM: created %d", got-before)
		}
		// The retry with the token finds the instance the failed call made.
		ids, err := ecsRun(c, ecsRunOpts{token: "after-commit"})
		if err != nil {
			t.Fatal(err)
		}
		defer cleanup(t, c, ids)
		if got := s.Stats().VMsCreated; got != before+1 || len(ids) != 1 {
			t.Fatalf("retry created VMs: %d, ids %v", got-before, ids)
		}
	})
	t.Run("standing error rate", func(t *testing.T) {
		s.SetFaults(ActionDeleteInstances, ActionFaults{ErrorRate: 1, ErrorCode: ECSCodeServiceUnavailable})
		defer s.SetFaults(ActionDeleteInstances, ActionFaults{})
		ids, err := ecsRun(c, ecsRunOpts{})
		if err != nil {
			t.Fatal(err)
		}
		wantECSErr(t, ecsDelete(c, true, ids...), ECSCodeServiceUnavailable, http.StatusServiceUnavailable)
		s.SetFaults(ActionDeleteInstances, ActionFaults{})
		cleanup(t, c, ids)
	})
}

// cleanup force-deletes ids.
func cleanup(t *testing.T, c *ecs.Client, ids []string) {
	t.Helper()
	if err := ecsDelete(c, true, ids...); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
}

func TestECSPagingAndFilters(t *testing.T) {
	s := startECS(t, testConfig())
	c := ecsClient(t, s, testSecretID, testKey)
	a, err := ecsRun(c, ecsRunOpts{amount: 20, tags: map[string]string{"pool": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := ecsRun(c, ecsRunOpts{amount: 5, zone: "cn-hangzhou-i", tags: map[string]string{"pool": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(a), b...) // creation order, as listed

	describe := func(req *ecs.DescribeInstancesRequest) *ecs.DescribeInstancesResponseBody {
		t.Helper()
		req.RegionId = dara.String(ecsRegion)
		resp, err := c.DescribeInstances(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Body
	}
	idsOf := func(body *ecs.DescribeInstancesResponseBody) []string {
		var out []string
		for _, in := range body.Instances.Instance {
			out = append(out, dara.StringValue(in.InstanceId))
		}
		return out
	}

	// PageNumber/PageSize (default size 10).
	var got []string
	for page := int32(1); page <= 3; page++ {
		body := describe(&ecs.DescribeInstancesRequest{PageNumber: dara.Int32(page)})
		if dara.Int32Value(body.TotalCount) != 25 || dara.Int32Value(body.PageSize) != 10 || dara.Int32Value(body.PageNumber) != page {
			t.Fatalf("page %d: total %d, size %d, number %d", page, dara.Int32Value(body.TotalCount), dara.Int32Value(body.PageSize), dara.Int32Value(body.PageNumber))
		}
		got = append(got, idsOf(body)...)
	}
	if !slices.Equal(got, all) {
		t.Fatalf("pages list %v, want %v", got, all)
	}
	if ids := idsOf(describe(&ecs.DescribeInstancesRequest{PageNumber: dara.Int32(4)})); len(ids) != 0 {
		t.Fatalf("page past the end lists %v", ids)
	}

	// NextToken/MaxResults.
	got = nil
	token := ""
	for range 10 {
		req := &ecs.DescribeInstancesRequest{MaxResults: dara.Int32(7)}
		if token != "" {
			req.NextToken = dara.String(token)
		}
		body := describe(req)
		got = append(got, idsOf(body)...)
		if token = dara.StringValue(body.NextToken); token == "" {
			break
		}
	}
	if !slices.Equal(got, all) {
		t.Fatalf("NextToken pages list %v, want %v", got, all)
	}
	_, err = c.DescribeInstances(&ecs.DescribeInstancesRequest{RegionId: dara.String(ecsRegion), NextToken: dara.String("bogus")})
	wantECSErr(t, err, ecsCodeNextTokenMalformed, http.StatusBadRequest)
	_, err = c.DescribeInstances(&ecs.DescribeInstancesRequest{RegionId: dara.String(ecsRegion), PageSize: dara.Int32(101)})
	wantECSErr(t, err, ecsCodeInvalidParameter, http.StatusBadRequest)

	// Filters.
	tagged := describe(&ecs.DescribeInstancesRequest{PageSize: dara.Int32(100),
		Tag: []*ecs.DescribeInstancesRequestTag{{Key: dara.String("pool"), Value: dara.String("b")}}})
	if ids := idsOf(tagged); !slices.Equal(ids, b) {
		t.Errorf("Tag pool=b lists %v, want %v", ids, b)
	}
	if n := dara.Int32Value(describe(&ecs.DescribeInstancesRequest{Tag: []*ecs.DescribeInstancesRequestTag{{Key: dara.String("pool")}}}).TotalCount); n != 25 {
		t.Errorf("Tag key pool (any value) counts %d, want 25", n)
	}
	if ids := idsOf(describe(&ecs.DescribeInstancesRequest{ZoneId: dara.String("cn-hangzhou-i")})); !slices.Equal(ids, b) {
		t.Errorf("ZoneId filter lists %v, want %v", ids, b)
	}
	picked := []string{b[1], a[3], "i-doesnotexist00000000"}
	if ids := idsOf(describe(&ecs.DescribeInstancesRequest{InstanceIds: dara.String(`["` + strings.Join(picked, `","`) + `"]`)})); !slices.Equal(ids, []string{a[3], b[1]}) {
		t.Errorf("InstanceIds lists %v", ids)
	}
	_, err = c.DescribeInstances(&ecs.DescribeInstancesRequest{RegionId: dara.String(ecsRegion), InstanceIds: dara.String("i-notjson")})
	wantECSErr(t, err, ecsCodeInstanceIDsMalformed, http.StatusBadRequest)
	// Another account sees nothing of these.
	if insts, err := ecsDescribe(ecsClient(t, s, "AKIDother", "other-key"), nil); err != nil || len(insts) != 0 {
		t.Errorf("other account lists %d instances (err %v)", len(insts), err)
	}
}

func TestECSDescribeInstanceStatusAndTagResources(t *testing.T) {
	s := startECS(t, testConfig())
	c := ecsClient(t, s, testSecretID, testKey)
	ids, err := ecsRun(c, ecsRunOpts{amount: 3})
	if err != nil {
		t.Fatal(err)
	}
	ecsWaitStatus(t, c, ids, ECSStatusRunning)

	resp, err := c.DescribeInstanceStatus(&ecs.DescribeInstanceStatusRequest{
		RegionId: dara.String(ecsRegion), InstanceId: dara.StringSlice(ids[:2]), PageSize: dara.Int32(50),
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range resp.Body.InstanceStatuses.InstanceStatus {
		if dara.StringValue(st.Status) != ECSStatusRunning {
			t.Errorf("%s is %s", dara.StringValue(st.InstanceId), dara.StringValue(st.Status))
		}
		got = append(got, dara.StringValue(st.InstanceId))
	}
	if !slices.Equal(got, ids[:2]) || dara.Int32Value(resp.Body.TotalCount) != 2 {
		t.Fatalf("DescribeInstanceStatus lists %v (total %d), want %v", got, dara.Int32Value(resp.Body.TotalCount), ids[:2])
	}

	for status, want := range map[string]int32{ECSStatusRunning: 3, ECSStatusPending: 0} {
		body, err := c.DescribeInstances(&ecs.DescribeInstancesRequest{RegionId: dara.String(ecsRegion), Status: dara.String(status)})
		if err != nil {
			t.Fatal(err)
		}
		if got := dara.Int32Value(body.Body.TotalCount); got != want {
			t.Errorf("Status=%s counts %d, want %d", status, got, want)
		}
	}

	tagReq := func(rt string, ids []string, kv ...string) error {
		req := &ecs.TagResourcesRequest{RegionId: dara.String(ecsRegion), ResourceType: dara.String(rt), ResourceId: dara.StringSlice(ids)}
		for i := 0; i < len(kv); i += 2 {
			req.Tag = append(req.Tag, &ecs.TagResourcesRequestTag{Key: dara.String(kv[i]), Value: dara.String(kv[i+1])})
		}
		_, err := c.TagResources(req)
		return err
	}
	if err := tagReq("instance", ids[1:], "nodesmith/group", "g1", "team", "x"); err != nil {
		t.Fatal(err)
	}
	if err := tagReq("instance", ids[2:], "team", "y"); err != nil { // overwrites a value
		t.Fatal(err)
	}
	body, err := c.DescribeInstances(&ecs.DescribeInstancesRequest{RegionId: dara.String(ecsRegion),
		Tag: []*ecs.DescribeInstancesRequestTag{{Key: dara.String("nodesmith/group"), Value: dara.String("g1")}}})
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string]map[string]string{}
	for _, in := range body.Body.Instances.Instance {
		m := map[string]string{}
		for _, tg := range in.Tags.Tag {
			m[dara.StringValue(tg.TagKey)] = dara.StringValue(tg.TagValue)
		}
		tags[dara.StringValue(in.InstanceId)] = m
	}
	if len(tags) != 2 || tags[ids[1]]["team"] != "x" || tags[ids[2]]["team"] != "y" {
		t.Fatalf("tagged instances: %v", tags)
	}

	wantECSErr(t, tagReq("instance", []string{ids[0], "i-doesnotexist00000000"}, "a", "b"), ecsCodeResourceIDNotFound, http.StatusNotFound)
	if info, _ := s.VM(ids[0]); len(info.Tags) != 0 {
		t.Errorf("a refused TagResources tagged %s: %v", ids[0], info.Tags)
	}
	wantECSErr(t, tagReq("disk", ids, "a", "b"), ecsCodeResourceTypeNotFound, http.StatusNotFound)
	wantECSErr(t, tagReq("instance", ids, "aliyun:x", "b"), ecsCodeTagKeyMalformed, http.StatusBadRequest)
	wantECSErr(t, tagReq("instance", ids), ecsCodeMissingParameter, http.StatusBadRequest)
}

func TestECSRunInstancesValidation(t *testing.T) {
	cfg := testConfig()
	cfg.VSwitchZones = map[string]string{"vsw-i": "cn-hangzhou-i"}
	s := startECS(t, cfg)
	c := ecsClient(t, s, testSecretID, testKey)
	run := func(mod func(*ecs.RunInstancesRequest)) error {
		req := &ecs.RunInstancesRequest{RegionId: dara.String(ecsRegion), ZoneId: dara.String(ecsZone),
			InstanceType: dara.String(ecsType), ImageId: dara.String(ecsImage), DryRun: dara.Bool(true)}
		mod(req)
		_, err := c.RunInstances(req)
		return err
	}
	wantECSErr(t, run(func(r *ecs.RunInstancesRequest) {}), ecsCodeDryRun, http.StatusBadRequest)
	wantECSErr(t, run(func(r *ecs.RunInstancesRequest) { r.Amount = dara.Int32(101) }), ecsCodeInvalidParameter, http.StatusBadRequest)
	wantECSErr(t, run(func(r *ecs.RunInstancesRequest) { r.Amount = dara.Int32(0) }), ecsCodeInvalidParameter, http.StatusBadRequest)
	wantECSErr(t, run(func(r *ecs.RunInstancesRequest) { r.ImageId = nil }), ecsCodeMissingParameter, http.StatusBadRequest)
	wantECSErr(t, run(func(r *ecs.RunInstancesRequest) { r.InstanceType = nil }), ecsCodeMissingParameter, http.StatusBadRequest)
	wantECSErr(t, run(func(r *ecs.RunInstancesRequest) { r.ZoneId = dara.String("cn-shanghai-a") }), ecsCodeZoneNotFound, http.StatusNotFound)
	wantECSErr(t, run(func(r *ecs.RunInstancesRequest) { r.ZoneId, r.VSwitchId = nil, dara.String("vsw-unknown") }), ecsCodeVSwitchNotFound, http.StatusNotFound)
	wantECSErr(t, run(func(r *ecs.RunInstancesRequest) { r.SpotStrategy = dara.String("Cheap") }), ecsCodeSpotStrategyInvalid, http.StatusBadRequest)
	wantECSErr(t, run(func(r *ecs.RunInstancesRequest) { r.InstanceChargeType = dara.String("Free") }), ecsCodeChargeTypeNotSupported, http.StatusBadRequest)
	wantECSErr(t, run(func(r *ecs.RunInstancesRequest) { r.RegionId = dara.String("") }), ecsCodeMissingParameter, http.StatusBadRequest)
	wantECSErr(t, run(func(r *ecs.RunInstancesRequest) {
		r.Tag = []*ecs.RunInstancesRequestTag{{Key: dara.String("k"), Value: dara.String("1")}, {Key: dara.String("k"), Value: dara.String("2")}}
	}), ecsCodeTagKeyDuplicated, http.StatusBadRequest)
	if s.Stats().VMsCreated != 0 {
		t.Fatal("refused calls created VMs")
	}

	// A VSwitchId alone gives the zone; spot and charge type are kept.
	resp, err := c.RunInstances(&ecs.RunInstancesRequest{RegionId: dara.String(ecsRegion), VSwitchId: dara.String("vsw-i"),
		InstanceType: dara.String(ecsType), ImageId: dara.String(ecsImage), SpotStrategy: dara.String("SpotAsPriceGo"),
		SecurityGroupIds: dara.StringSlice([]string{"sg-1", "sg-2"}), InstanceName: dara.String("node"), Amount: dara.Int32(2),
		UniqueSuffix: dara.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	ids := dara.StringSliceValue(resp.Body.InstanceIdSets.InstanceIdSet)
	insts := ecsWaitStatus(t, c, ids, ECSStatusRunning)
	for i, in := range insts {
		if dara.StringValue(in.ZoneId) != "cn-hangzhou-i" || dara.StringValue(in.SpotStrategy) != "SpotAsPriceGo" ||
			dara.StringValue(in.InstanceChargeType) != "PostPaid" ||
			!slices.Equal(dara.StringSliceValue(in.SecurityGroupIds.SecurityGroupId), []string{"sg-1", "sg-2"}) ||
			dara.StringValue(in.InstanceName) != []string{"node001", "node002"}[i] {
			t.Errorf("instance %d: %s", i, in.String())
		}
	}
}

// recordingECS serves an ECS front end and keeps the first request, so a
// test can replay or tamper with what the SDK signed.
type recordingECS struct {
	next http.Handler
	mu   sync.Mutex
	last *http.Request
	body []byte
}

func (r *recordingECS) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(body))
	r.mu.Lock()
	if r.last == nil { // the SDK's request, not the test's replays
		r.last, r.body = req.Clone(context.Background()), body
	}
	r.mu.Unlock()
	r.next.ServeHTTP(w, req)
}

func (r *recordingECS) replay(t *testing.T, base string, mod func(*http.Request)) (int, string) {
	t.Helper()
	r.mu.Lock()
	last, body := r.last, r.body
	r.mu.Unlock()
	req, err := http.NewRequest(last.Method, base+last.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = last.Header.Clone()
	if mod != nil {
		mod(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var e ecsError
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if e.RequestID == "" || (e.Code != "" && (e.HostID == "" || e.Recommend == "")) {
		t.Errorf("error body lacks fields: %+v", e)
	}
	return resp.StatusCode, e.Code
}

func TestECSReplayAndTampering(t *testing.T) {
	e, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	rec := &recordingECS{next: e.ECS()}
	hs := httptest.NewServer(rec)
	t.Cleanup(hs.Close)
	c, err := NewECSClient(strings.TrimPrefix(hs.URL, "http://"), testSecretID, testKey, ecsRegion)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ecsDescribe(c, nil); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		mod    func(*http.Request)
		status int
		code   string
	}{
		{"replayed nonce", nil, http.StatusBadRequest, ecsCodeSignatureNonceUsed},
		{"query changed", func(r *http.Request) { r.URL.RawQuery += "&ZoneId=cn-hangzhou-h" }, http.StatusBadRequest, ecsCodeSignatureMismatch},
		{"signed header changed", func(r *http.Request) { r.Header.Set("x-acs-action", ActionDeleteInstances) }, http.StatusBadRequest, ecsCodeSignatureMismatch},
		{"body added", func(r *http.Request) {
			r.Body = io.NopCloser(strings.NewReader("InstanceId.1=i-x"))
			r.ContentLength = 16
		}, http.StatusBadRequest, ecsCodeSignatureMismatch},
		{"no signature", func(r *http.Request) { r.Header.Del("Authorization") }, http.StatusBadRequest, ecsCodeIncompleteSignature},
		{"other algorithm", func(r *http.Request) {
			r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), acs3Algorithm, "ACS3-HMAC-SM3", 1))
		}, http.StatusBadRequest, ecsCodeIncompleteSignature},
		{"bad date", func(r *http.Request) { r.Header.Set("x-acs-date", "yesterday") }, http.StatusBadRequest, ecsCodeInvalidTimeStampFormat},
		{"no nonce", func(r *http.Request) { r.Header.Del("x-acs-signature-nonce") }, http.StatusBadRequest, ecsCodeMissingNonce},
		{"sts token", func(r *http.Request) { r.Header.Set("x-acs-security-token", "tok") }, http.StatusBadRequest, ecsCodeSecurityTokenMalformed},
	}
	for _, tc := range cases {
		if status, code := rec.replay(t, hs.URL, tc.mod); status != tc.status || code != tc.code {
			t.Errorf("%s: got %d %s, want %d %s", tc.name, status, code, tc.status, tc.code)
		}
	}
	// Never a crash on junk: unknown actions and versions are answered.
	if _, err := c.DescribeRegions(&ecs.DescribeRegionsRequest{}); err == nil {
		t.Error("DescribeRegions is not implemented and must be refused")
	} else if code, status := sdkErr(err); code != ecsCodeInvalidAction || status != http.StatusNotFound {
		t.Errorf("unknown action: %s %d", code, status)
	}
}

func TestECSStateSurvivesRestart(t *testing.T) {
	cfg := testConfig()
	cfg.StateFile = filepath.Join(t.TempDir(), "state.json")
	s1, err := StartECS("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	c1 := ecsClient(t, s1, testSecretID, testKey)
	ids, err := ecsRun(c1, ecsRunOpts{amount: 2, token: "tok-p", tags: map[string]string{"pool": "p"}})
	if err != nil {
		t.Fatal(err)
	}
	ecsWaitStatus(t, c1, ids, ECSStatusRunning)
	before, err := ecsDescribe(c1, ids)
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := startECS(t, cfg)
	c2 := ecsClient(t, s2, testSecretID, testKey)
	after, err := ecsDescribe(c2, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("after restart %d instances, want %d", len(after), len(before))
	}
	for i := range after {
		if after[i].String() != before[i].String() {
			t.Errorf("instance changed across restart:\nbefore %s\nafter  %s", before[i], after[i])
		}
	}
	// The ClientToken record, with its parameters, survived too.
	again, err := ecsRun(c2, ecsRunOpts{amount: 2, token: "tok-p", tags: map[string]string{"pool": "p"}})
	if err != nil || !slices.Equal(again, ids) {
		t.Fatalf("token retry after restart: %v %v, want %v", again, err, ids)
	}
	_, err = ecsRun(c2, ecsRunOpts{amount: 1, token: "tok-p"})
	wantECSErr(t, err, ECSCodeIdempotentMismatch, http.StatusBadRequest)
	if err := ecsDelete(c2, true, ids...); err != nil {
		t.Fatal(err)
	}
}

func TestECSSSHEndToEndJoin(t *testing.T) {
	w := newSSHWorldWith(t, StartECS)
	c := ecsClient(t, w.srv, testSecretID, testKey)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	ids, err := ecsRun(c, ecsRunOpts{})
	if err != nil {
		t.Fatal(err)
	}
	insts := ecsWaitStatus(t, c, ids, ECSStatusRunning)
	ip := dara.StringSliceValue(insts[0].VpcAttributes.PrivateIpAddress.IpAddress)[0]
	conn := w.dial(t, ip, 2222)
	if _, errOut, status := sshRun(t, conn, "sh -s", joinWithDefaults); status != 0 {
		t.Fatalf("join: %d %s", status, errOut)
	}
	want := ECSProviderID(ecsRegion, ids[0]) // the alicloud provider's "<region>.<instance-id>"
	if _, err := w.cluster.WaitFor(ctx, ids[0], func(n simcluster.Node) bool { return n.Ready && n.ProviderID == want }); err != nil {
		t.Fatal(err)
	}
	if err := ecsDelete(c, true, ids...); err != nil {
		t.Fatal(err)
	}
	if _, err := w.cluster.WaitFor(ctx, ids[0], func(n simcluster.Node) bool { return !n.Ready }); err != nil {
		t.Fatal(err)
	}
}

func TestECSHold(t *testing.T) {
	s := startECS(t, testConfig())
	hold := NewHold(s)
	hs := httptest.NewServer(hold)
	t.Cleanup(hs.Close)
	t.Cleanup(hold.ReleaseAll)
	held, err := NewECSClient(strings.TrimPrefix(hs.URL, "http://"), testSecretID, testKey, ecsRegion)
	if err != nil {
		t.Fatal(err)
	}
	call := hold.Next(ActionRunInstances)
	done := make(chan error, 1)
	go func() {
		_, err := ecsRun(held, ecsRunOpts{token: "held"})
		done <- err
	}()
	<-call.Held()
	if call.ClientToken() != "held" {
		t.Errorf("held ClientToken = %q", call.ClientToken())
	}
	// The instance exists while its creator still waits.
	if insts, err := ecsDescribe(ecsClient(t, s, testSecretID, testKey), nil); err != nil || len(insts) != 1 {
		t.Fatalf("during the hold: %d instances, %v", len(insts), err)
	}
	call.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// ecsRaw sends a request signed as the SDK signs, with the parameters in
// query and, if not empty, a form body; it returns the HTTP status, the
// headers and the decoded JSON answer.
func ecsRaw(t *testing.T, s *Server, method, query, form string) (int, http.Header, map[string]any) {
	t.Helper()
	var body io.Reader = http.NoBody
	if form != "" {
		body = strings.NewReader(form)
	}
	req, err := http.NewRequest(method, "http://"+s.Endpoint()+"/?"+query, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Host = s.Endpoint()
	req.Header.Set("x-acs-date", time.Now().UTC().Format("2006-01-02T15:04:05Z"))
	req.Header.Set("x-acs-signature-nonce", newUUID())
	req.Header.Set("x-acs-content-sha256", sha256Hex([]byte(form)))
	signed := []string{"host", "x-acs-content-sha256", "x-acs-date", "x-acs-signature-nonce"}
	req.Header.Set("Authorization", acs3Algorithm+" Credential="+testSecretID+",SignedHeaders="+strings.Join(signed, ";")+
		",Signature="+acs3Signature(testKey, req, signed, sha256Hex([]byte(form))))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, out
}

// TestECSClassicRPCForm: Action and Version as parameters instead of the
// SDK's x-acs-* headers, in the query or a form body, over GET or POST.
func TestECSClassicRPCForm(t *testing.T) {
	s := startECS(t, testConfig())
	send := func(method, query, form string) (int, map[string]any) {
		t.Helper()
		status, _, out := ecsRaw(t, s, method, query, form)
		return status, out
	}
	status, out := send(http.MethodPost, "Action=RunInstances&Version=2014-05-26&RegionId="+ecsRegion,
		"ZoneId="+ecsZone+"&InstanceType="+ecsType+"&ImageId=img&Amount=2&Tag.1.Key=k&Tag.1.Value=v")
	if status != http.StatusOK {
		t.Fatalf("RunInstances with a form body: %d %v", status, out)
	}
	status, out = send(http.MethodGet, "Action=DescribeInstances&Version=2014-05-26&RegionId="+ecsRegion+"&Tag.1.Key=k", "")
	if status != http.StatusOK || out["TotalCount"] != float64(2) {
		t.Fatalf("DescribeInstances over GET: %d %v", status, out)
	}
	status, out = send(http.MethodGet, "Action=DescribeInstances&Version=2016-01-01&RegionId="+ecsRegion, "")
	if status != http.StatusBadRequest || out["Code"] != ecsCodeInvalidVersion {
		t.Fatalf("wrong Version: %d %v", status, out)
	}
	status, out = send(http.MethodGet, "Action=DescribeInstances&Version=2014-05-26", "")
	if status != http.StatusBadRequest || out["Code"] != ecsCodeMissingParameter || !strings.Contains(out["Message"].(string), "RegionId") {
		t.Fatalf("missing RegionId: %d %v", status, out)
	}
	status, out = send(http.MethodGet, "Action=DescribeInstances&Version=2014-05-26&RegionId=mars-1", "")
	if status != http.StatusOK {
		// Without Config.Regions every region is accepted (and empty).
		t.Fatalf("any region: %d %v", status, out)
	}
	status, out = send(http.MethodPost, "Action=DeleteInstances&Version=2014-05-26&RegionId="+ecsRegion, "InstanceId.2=i-x")
	if status != http.StatusBadRequest || out["Code"] != ecsCodeInvalidParameter {
		t.Fatalf("InstanceId.2 without .1: %d %v", status, out)
	}
}

func TestECSRegions(t *testing.T) {
	cfg := testConfig()
	cfg.Regions = []string{ecsRegion}
	s := startECS(t, cfg)
	c, err := NewECSClient(s.Endpoint(), testSecretID, testKey, "cn-beijing")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.DescribeInstances(&ecs.DescribeInstancesRequest{RegionId: dara.String("cn-beijing")})
	wantECSErr(t, err, ecsCodeRegionNotFound, http.StatusNotFound)
}

// TestECSConcurrentTokenRetries: clients racing with one ClientToken get
// one set of instances between them.
func TestECSConcurrentTokenRetries(t *testing.T) {
	s := startECS(t, testConfig())
	const n = 8
	results := make(chan []string, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		c := ecsClient(t, s, testSecretID, testKey) // SDK clients are not safe for concurrent use
		wg.Go(func() {
			ids, err := ecsRun(c, ecsRunOpts{amount: 3, token: "race"})
			if err != nil {
				errs <- err
				return
			}
			results <- ids
		})
	}
	wg.Wait()
	close(results)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var first []string
	for ids := range results {
		if first == nil {
			first = ids
		}
		if !slices.Equal(ids, first) {
			t.Fatalf("answers differ: %v and %v", ids, first)
		}
	}
	if st := s.Stats(); st.VMsCreated != 3 || st.ClientTokenReplays["acct1/ecs:race"] != n-1 {
		t.Fatalf("created %d VMs, replays %v", st.VMsCreated, st.ClientTokenReplays)
	}
}
