package cvmemu

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"
)

func TestAuthFailures(t *testing.T) {
	cfg := testConfig()
	s := startServer(t, cfg)

	_, err := runInstances(sdkClient(t, s, testSecretID, "wrong-key"), runOpts{})
	wantCode(t, err, CodeAuthSignatureFailure)

	_, err = runInstances(sdkClient(t, s, "AKIDunknown", testKey), runOpts{})
	wantCode(t, err, CodeAuthSecretIDNotFound)

	// The SDK stamps requests with the real time; a server clock 10 minutes
	// ahead sees them as expired.
	cfg.Now = func() time.Time { return time.Now().Add(10 * time.Minute) }
	skewed := startServer(t, cfg)
	_, err = runInstances(sdkClient(t, skewed, testSecretID, testKey), runOpts{})
	wantCode(t, err, CodeAuthSignatureExpire)

	// A timestamp 4 minutes off is still fine.
	cfg.Now = func() time.Time { return time.Now().Add(4 * time.Minute) }
	tolerant := startServer(t, cfg)
	if _, err := describeIDs(sdkClient(t, tolerant, testSecretID, testKey), nil); err != nil {
		t.Fatalf("4 minute skew must be accepted: %v", err)
	}

	if r := sendRaw(t, s, rawRequest{action: ActionDescribeInstances, body: "{}", noAuth: true}); r.code() != CodeAuthInvalidAuthorization {
		t.Errorf("missing Authorization: %q", r.code())
	}
	if got := s.Stats(); got.VMsCreated != 0 || got.ErrorCodes[CodeAuthSignatureFailure] != 1 {
		t.Errorf("stats after auth failures: %+v", got)
	}
}

func TestMalformedAuthorization(t *testing.T) {
	s := startServer(t, testConfig())
	for _, auth := range []string{
		"SKIP",
		"TC3-HMAC-SHA256 garbage",
		"TC3-HMAC-SHA256 Credential=AKIDtest/2024-01-01/cvm, SignedHeaders=content-type;host, Signature=00",
		"TC3-HMAC-SHA256 Credential=AKIDtest/2024-01-01/cvm/tc3_request, SignedHeaders=host, Signature=00",
	} {
		req, err := newSignedHTTPRequest(s, auth)
		if err != nil {
			t.Fatal(err)
		}
		if got := doRaw(t, req); got.code() != CodeAuthInvalidAuthorization {
			t.Errorf("Authorization %q: code %q, want %s", auth, got.code(), CodeAuthInvalidAuthorization)
		}
	}
}

func TestMalformedRequestsNeverPanic(t *testing.T) {
	s := startServer(t, testConfig())
	cases := []struct {
		name string
		req  rawRequest
		want string
	}{
		{"broken JSON", rawRequest{action: ActionRunInstances, body: `{"InstanceCount": `}, CodeInvalidParameter},
		{"JSON array", rawRequest{action: ActionDescribeInstances, body: `[1,2]`}, CodeInvalidParameter},
		{"trailing data", rawRequest{action: ActionDescribeInstances, body: `{} {}`}, CodeInvalidParameter},
		{"wrong type", rawRequest{action: ActionRunInstances, body: `{"InstanceCount":"two"}`}, CodeInvalidParameter},
		{"unknown parameter", rawRequest{action: ActionDescribeInstances, body: `{"Bogus":1}`}, CodeUnknownParameter},
		{"null ids", rawRequest{action: ActionTerminateInstances, body: `{"InstanceIds":[null]}`}, CodeInstanceIDMalformed},
		{"unknown action", rawRequest{action: "RebootInstances", body: `{}`}, CodeInvalidAction},
		{"wrong version", rawRequest{action: ActionDescribeInstances, version: "2099-01-01", body: `{}`}, CodeNoSuchVersion},
		{"missing region", rawRequest{action: ActionDescribeInstances, region: "-", body: `{}`}, CodeMissingParameter},
		{"GET", rawRequest{method: "GET", action: ActionDescribeInstances}, CodeInvalidParameter},
		{"form body", rawRequest{action: ActionDescribeInstances, contentType: "application/x-www-form-urlencoded", body: "a=b"}, CodeInvalidParameter},
		{"zone of other region", rawRequest{action: ActionRunInstances,
			body: `{"Placement":{"Zone":"ap-beijing-1"},"ImageId":"img-1"}`}, CodeZoneMismatchRegion},
		{"no zone", rawRequest{action: ActionRunInstances, body: `{"ImageId":"img-1"}`}, CodeMissingParameter},
		{"no image", rawRequest{action: ActionRunInstances, body: `{"Placement":{"Zone":"ap-guangzhou-3"}}`}, CodeMissingParameter},
		{"count 0", rawRequest{action: ActionRunInstances,
			body: `{"Placement":{"Zone":"ap-guangzhou-3"},"ImageId":"img-1","InstanceCount":0}`}, CodeInvalidParameterValue},
		{"count 101", rawRequest{action: ActionRunInstances,
			body: `{"Placement":{"Zone":"ap-guangzhou-3"},"ImageId":"img-1","InstanceCount":101}`}, CodeInvalidParameterValue},
		{"empty tag key", rawRequest{action: ActionRunInstances,
			body: `{"Placement":{"Zone":"ap-guangzhou-3"},"ImageId":"img-1","TagSpecification":[{"ResourceType":"instance","Tags":[{"Key":"","Value":"x"}]}]}`}, CodeIllegalTagKey},
		{"duplicate tags", rawRequest{action: ActionRunInstances,
			body: `{"Placement":{"Zone":"ap-guangzhou-3"},"ImageId":"img-1","TagSpecification":[{"ResourceType":"instance","Tags":[{"Key":"a"},{"Key":"a"}]}]}`}, CodeParamValueDuplicateTags},
		{"long token", rawRequest{action: ActionRunInstances,
			body: `{"Placement":{"Zone":"ap-guangzhou-3"},"ImageId":"img-1","ClientToken":"` + strings.Repeat("x", 65) + `"}`}, CodeClientTokenTooLong},
		{"dry run", rawRequest{action: ActionRunInstances,
			body: `{"Placement":{"Zone":"ap-guangzhou-3"},"ImageId":"img-1","DryRun":true}`}, CodeDryRunOperation},
	}
	for _, tc := range cases {
		if got := sendRaw(t, s, tc.req); got.code() != tc.want {
			t.Errorf("%s: code %q, want %q", tc.name, got.code(), tc.want)
		}
	}
	if st := s.Stats(); st.VMsCreated != 0 {
		t.Errorf("invalid requests created %d VMs", st.VMsCreated)
	}
	// The raw signer is right: a valid request succeeds.
	if got := sendRaw(t, s, rawRequest{action: ActionDescribeInstances, body: `{}`}); got.code() != "" {
		t.Fatalf("valid raw request failed: %s", got.code())
	}
}

func TestRunDescribeUntilRunning(t *testing.T) {
	s := startServer(t, testConfig())
	c := sdkClient(t, s, testSecretID, testKey)

	ids, err := runInstances(c, runOpts{count: 2, name: "web-{R:7}", itype: "S5.2XLARGE16",
		tags: map[string]string{"nodesmith/pool": "gpu", "team": "infra"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 || ids[0] == ids[1] {
		t.Fatalf("ids = %v", ids)
	}
	for _, id := range ids {
		if !instanceIDPattern.MatchString(id) {
			t.Errorf("id %q does not look like ins-xxxxxxxx", id)
		}
	}

	// Right after creation the VMs are PENDING without an address.
	resp, err := describeIDs(c, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range resp.InstanceSet {
		if *in.InstanceState == StatePending && len(in.PrivateIpAddresses) != 0 {
			t.Errorf("pending VM has IPs %v", common.StringValues(in.PrivateIpAddresses))
		}
	}

	insts := waitState(t, c, ids, StateRunning)
	names := []string{}
	ips := map[string]bool{}
	for _, in := range insts {
		names = append(names, *in.InstanceName)
		if len(in.PrivateIpAddresses) != 1 {
			t.Fatalf("running VM IPs = %v", common.StringValues(in.PrivateIpAddresses))
		}
		ip := netip.MustParseAddr(*in.PrivateIpAddresses[0])
		if !netip.MustParsePrefix("127.0.0.0/8").Contains(ip) || ips[ip.String()] {
			t.Errorf("bad or duplicate IP %s", ip)
		}
		ips[ip.String()] = true
		if *in.Placement.Zone != testZone || *in.InstanceType != "S5.2XLARGE16" || *in.ImageId != testImage {
			t.Errorf("instance fields: zone %s type %s image %s", *in.Placement.Zone, *in.InstanceType, *in.ImageId)
		}
		if *in.CPU != 8 || *in.Memory != 16 {
			t.Errorf("shape = %d CPU / %d GiB, want 8/16", *in.CPU, *in.Memory)
		}
		if _, err := time.Parse(time.RFC3339, *in.CreatedTime); err != nil {
			t.Errorf("CreatedTime %q: %v", *in.CreatedTime, err)
		}
		tags := map[string]string{}
		for _, tg := range in.Tags {
			tags[*tg.Key] = *tg.Value
		}
		if tags["nodesmith/pool"] != "gpu" || tags["team"] != "infra" || len(tags) != 2 {
			t.Errorf("tags = %v", tags)
		}
		if *in.LatestOperation != ActionRunInstances || *in.LatestOperationState != "SUCCESS" {
			t.Errorf("latest operation %s/%s", *in.LatestOperation, *in.LatestOperationState)
		}
	}
	slices.Sort(names)
	if fmt.Sprint(names) != "[web-7 web-8]" {
		t.Errorf("names = %v", names)
	}

	// DescribeInstancesStatus agrees.
	sreq := cvm.NewDescribeInstancesStatusRequest()
	sreq.InstanceIds = common.StringPtrs(ids)
	sresp, err := c.DescribeInstancesStatus(sreq)
	if err != nil {
		t.Fatal(err)
	}
	if *sresp.Response.TotalCount != 2 || *sresp.Response.InstanceStatusSet[0].InstanceState != StateRunning {
		t.Errorf("status = %+v", sresp.Response)
	}

	// Another account sees none of it.
	other := sdkClient(t, s, "AKIDother", "other-key")
	if resp, err := describeIDs(other, ids); err != nil || *resp.TotalCount != 0 {
		t.Errorf("other account sees %v instances (err %v)", resp, err)
	}
}

func TestClientTokenIdempotency(t *testing.T) {
	s := startServer(t, testConfig())
	c := sdkClient(t, s, testSecretID, testKey)

	var first []string
	for i := range 3 {
		ids, err := runInstances(c, runOpts{count: 2, token: "scale-up-42"})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = ids
		} else if !slices.Equal(ids, first) {
			t.Fatalf("call %d returned %v, first call %v", i+1, ids, first)
		}
	}
	// The same token from another account is a different request.
	otherIDs, err := runInstances(sdkClient(t, s, "AKIDother", "other-key"), runOpts{count: 1, token: "scale-up-42"})
	if err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.VMsCreated != 3 || st.VMsLive != 3 || st.RunInstancesCalls != 4 {
		t.Errorf("created %d live %d calls %d, want 3/3/4", st.VMsCreated, st.VMsLive, st.RunInstancesCalls)
	}
	if st.ClientTokenCreations["acct1/scale-up-42"] != 1 || st.ClientTokenReplays["acct1/scale-up-42"] != 2 ||
		st.ClientTokenCreations["acct2/scale-up-42"] != 1 || st.TokensCreatedTwice != 0 {
		t.Errorf("token stats: creations %v replays %v twice %d", st.ClientTokenCreations, st.ClientTokenReplays, st.TokensCreatedTwice)
	}
	if slices.Contains(first, otherIDs[0]) {
		t.Error("accounts share instances")
	}
}

func TestFaultAfterCommitIsRecoverableWithToken(t *testing.T) {
	s := startServer(t, testConfig())
	c := sdkClient(t, s, testSecretID, testKey)

	// The first call creates the VMs but the answer is lost.
	s.InjectFaults(ActionRunInstances, Fault{AfterCommit: true, DropConnection: true})
	_, err := runInstances(c, runOpts{count: 3, token: "tok-1"})
	wantCode(t, err, "ClientError.NetworkError")
	if st := s.Stats(); st.VMsCreated != 3 {
		t.Fatalf("created %d, want 3 (fault was after commit)", st.VMsCreated)
	}
	// The retry with the same token learns the ids instead of creating more.
	ids, err := runInstances(c, runOpts{count: 3, token: "tok-1"})
	if err != nil || len(ids) != 3 {
		t.Fatalf("retry: %v %v", ids, err)
	}
	if st := s.Stats(); st.VMsCreated != 3 {
		t.Fatalf("retry created VMs: %d", st.VMsCreated)
	}

	// Before-commit faults change nothing; a chosen code is answered.
	s.InjectFaults(ActionRunInstances, Fault{Code: CodeSoldOutInstanceType})
	_, err = runInstances(c, runOpts{token: "tok-2"})
	wantCode(t, err, CodeSoldOutInstanceType)
	if st := s.Stats(); st.VMsCreated != 3 {
		t.Fatalf("before-commit fault created VMs: %d", st.VMsCreated)
	}

	// Standing error rate 1: every call fails until cleared.
	s.SetFaults(ActionDescribeInstances, ActionFaults{ErrorRate: 1})
	_, err = describeIDs(c, nil)
	wantCode(t, err, CodeInternalError)
	s.ClearFaults()
	if _, err := describeIDs(c, nil); err != nil {
		t.Fatal(err)
	}

	// Latency is added (a lower bound is the only safe timing assertion).
	s.SetFaults(ActionDescribeInstances, ActionFaults{Latency: 150 * time.Millisecond})
	start := time.Now()
	if _, err := describeIDs(c, nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("latency fault: call took %v", d)
	}
	if st := s.Stats(); st.Errors[ActionRunInstances] != 2 || st.Errors[ActionDescribeInstances] != 1 {
		t.Errorf("errors by action = %v", st.Errors)
	}
}

func TestQuotaAndStockOut(t *testing.T) {
	cfg := testConfig()
	cfg.Quota = Quota{MaxInstances: 3}
	s := startServer(t, cfg)
	c := sdkClient(t, s, testSecretID, testKey)

	if _, err := runInstances(c, runOpts{count: 2}); err != nil {
		t.Fatal(err)
	}
	_, err := runInstances(c, runOpts{count: 2})
	wantCode(t, err, CodeInstanceQuota)
	ids, err := runInstances(c, runOpts{count: 1})
	if err != nil {
		t.Fatalf("last instance within quota: %v", err)
	}
	// Terminated instances free their quota once they are gone.
	if err := terminate(c, ids[0]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testTimeout)
	for {
		if _, err = runInstances(c, runOpts{count: 1}); err == nil {
			break
		}
		wantCode(t, err, CodeInstanceQuota)
		if time.Now().After(deadline) {
			t.Fatal("quota never freed")
		}
		time.Sleep(20 * time.Millisecond)
	}

	s.SetQuota(Quota{MaxInstancesPerZone: 3})
	_, err = runInstances(c, runOpts{count: 1})
	wantCode(t, err, CodeInstanceQuota)
	if _, err := runInstances(c, runOpts{count: 1, zone: "ap-guangzhou-4"}); err != nil {
		t.Fatalf("other zone: %v", err)
	}

	s.SetQuota(Quota{})
	s.SetStockOuts([]StockOut{{Zone: testZone, InstanceType: "GN7.2XLARGE32"}, {InstanceType: "SA2.MEDIUM4", Code: CodeSoldOutInstanceType}})
	_, err = runInstances(c, runOpts{itype: "GN7.2XLARGE32"})
	wantCode(t, err, CodeInsufficientInstanceType)
	_, err = runInstances(c, runOpts{itype: "SA2.MEDIUM4", zone: "ap-guangzhou-6"})
	wantCode(t, err, CodeSoldOutInstanceType)
	if _, err := runInstances(c, runOpts{itype: "GN7.2XLARGE32", zone: "ap-guangzhou-6"}); err != nil {
		t.Fatalf("stock-out is per zone: %v", err)
	}
}

func TestRateLimit(t *testing.T) {
	cfg := testConfig()
	cfg.RateLimits = map[string]float64{ActionDescribeInstances: 1}
	s := startServer(t, cfg)
	c := sdkClient(t, s, testSecretID, testKey)

	// 20 back-to-back calls can only all pass if they take 19s; they don't.
	throttled := 0
	for range 20 {
		_, err := describeIDs(c, nil)
		switch errCode(err) {
		case "":
		case CodeRequestLimitExceeded:
			throttled++
		default:
			t.Fatal(err)
		}
	}
	if throttled == 0 {
		t.Fatal("no RequestLimitExceeded at 20 calls for a 1/s limit")
	}
	// Other actions and other accounts have their own buckets.
	if _, err := runInstances(c, runOpts{}); err != nil {
		t.Fatal(err)
	}
	if _, err := describeIDs(sdkClient(t, s, "AKIDother", "other-key"), nil); err != nil {
		t.Fatalf("other account throttled: %v", err)
	}
	st := s.Stats()
	if st.Throttled[ActionDescribeInstances] != throttled || st.ErrorCodes[CodeRequestLimitExceeded] != throttled {
		t.Errorf("throttle stats %v / %v, want %d", st.Throttled, st.ErrorCodes, throttled)
	}
	if st.PeakRequestsPerSecond[ActionDescribeInstances] < 2 {
		t.Errorf("peak rate = %d, want >= 2", st.PeakRequestsPerSecond[ActionDescribeInstances])
	}

	// Raising the limit at runtime takes effect.
	s.SetRateLimit(ActionDescribeInstances, 0)
	for range 5 {
		if _, err := describeIDs(c, nil); err != nil {
			t.Fatalf("after removing limit: %v", err)
		}
	}
}

func TestTerminate(t *testing.T) {
	s := startServer(t, testConfig())
	c := sdkClient(t, s, testSecretID, testKey)

	wantCode(t, terminate(c, "ins-00000000"), CodeInstanceIDNotFound)
	wantCode(t, terminate(c, "i-123"), CodeInstanceIDMalformed)
	wantCode(t, terminate(c), CodeMissingParameter)
	many := make([]string, 101)
	for i := range many {
		many[i] = fmt.Sprintf("ins-%08d", i)
	}
	wantCode(t, terminate(c, many...), CodeParamValueLimitExceeded)

	ids, err := runInstances(c, runOpts{count: 2})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, c, ids, StateRunning)
	// All or nothing: one unknown id fails the call and terminates nothing.
	wantCode(t, terminate(c, ids[0], "ins-zzzzzzzz"), CodeInstanceIDNotFound)
	if resp, _ := describeIDs(c, ids); *resp.InstanceSet[0].InstanceState != StateRunning {
		t.Fatal("partial terminate happened")
	}

	s.SetTerminateDelay(time.Hour) // keep them visible while TERMINATING
	if err := terminate(c, ids...); err != nil {
		t.Fatal(err)
	}
	insts := waitState(t, c, ids, StateTerminating)
	if *insts[0].LatestOperation != ActionTerminateInstances {
		t.Errorf("latest operation = %s", *insts[0].LatestOperation)
	}
	wantCode(t, terminate(c, ids[0]), CodeInstanceStateTerminating)

	// Once gone they are simply absent, and terminating them is NotFound.
	s.SetTerminateDelay(0)
	ids2, err := runInstances(c, runOpts{count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := terminate(c, ids2...); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testTimeout)
	for {
		resp, err := describeIDs(c, ids2)
		if err != nil {
			t.Fatal(err)
		}
		if *resp.TotalCount == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("terminated VM never disappeared")
		}
		time.Sleep(20 * time.Millisecond)
	}
	wantCode(t, terminate(c, ids2...), CodeInstanceIDNotFound)
	st := s.Stats()
	if st.VMsTerminated != 3 || st.VMsLive != 2 || st.VMsCreated != 3 {
		t.Errorf("stats: terminated %d live %d created %d", st.VMsTerminated, st.VMsLive, st.VMsCreated)
	}
}

func TestPagingAndFilters(t *testing.T) {
	s := startServer(t, testConfig())
	c := sdkClient(t, s, testSecretID, testKey)

	poolA, err := runInstances(c, runOpts{count: 25, tags: map[string]string{"pool": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	poolB, err := runInstances(c, runOpts{count: 5, zone: "ap-guangzhou-4", tags: map[string]string{"pool": "b"}})
	if err != nil {
		t.Fatal(err)
	}

	describe := func(filters map[string][]string, offset, limit int64) (*cvm.DescribeInstancesResponseParams, error) {
		req := cvm.NewDescribeInstancesRequest()
		for name, vals := range filters {
			req.Filters = append(req.Filters, &cvm.Filter{Name: common.StringPtr(name), Values: common.StringPtrs(vals)})
		}
		req.Offset = common.Int64Ptr(offset)
		if limit > 0 {
			req.Limit = common.Int64Ptr(limit)
		}
		resp, err := c.DescribeInstances(req)
		if err != nil {
			return nil, err
		}
		return resp.Response, nil
	}

	seen := map[string]bool{}
	for offset := int64(0); offset < 30; offset += 10 {
		resp, err := describe(map[string][]string{"tag:pool": {"a"}}, offset, 10)
		if err != nil {
			t.Fatal(err)
		}
		if *resp.TotalCount != 25 {
			t.Fatalf("TotalCount = %d, want 25", *resp.TotalCount)
		}
		if want := min(10, 25-int(offset)); len(resp.InstanceSet) != want {
			t.Fatalf("page at %d has %d items, want %d", offset, len(resp.InstanceSet), want)
		}
		for _, in := range resp.InstanceSet {
			if seen[*in.InstanceId] {
				t.Fatalf("%s on two pages", *in.InstanceId)
			}
			seen[*in.InstanceId] = true
		}
	}
	for _, id := range poolA {
		if !seen[id] {
			t.Fatalf("%s missing from pages", id)
		}
	}

	// The default Limit is 20, also when asking by InstanceIds.
	resp, err := describe(nil, 0, 0)
	if err != nil || *resp.TotalCount != 30 || len(resp.InstanceSet) != 20 {
		t.Fatalf("default page: total %v, items %d, err %v", resp.TotalCount, len(resp.InstanceSet), err)
	}

	counts := map[string]int64{}
	for name, f := range map[string]map[string][]string{
		"pool b":         {"tag:pool": {"b"}},
		"pool a or b":    {"tag:pool": {"a", "b"}},
		"zone":           {"zone": {"ap-guangzhou-4"}},
		"zone and tag":   {"zone": {"ap-guangzhou-4"}, "tag:pool": {"a"}},
		"instance-id":    {"instance-id": {poolA[0], poolB[0], "ins-00000000"}},
		"tag-key":        {"tag-key": {"pool"}},
		"missing tag":    {"tag:nope": {"a"}},
		"pending or run": {"instance-state": {StatePending, StateRunning}},
	} {
		resp, err := describe(f, 0, 100)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		counts[name] = *resp.TotalCount
	}
	want := map[string]int64{"pool b": 5, "pool a or b": 30, "zone": 5, "zone and tag": 0, "instance-id": 2,
		"tag-key": 30, "missing tag": 0, "pending or run": 30}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("filter counts = %v\nwant %v", counts, want)
	}

	// Unknown ids are absent, not errors.
	r, err := describeIDs(c, []string{poolB[1], "ins-00000000"})
	if err != nil || *r.TotalCount != 1 || *r.InstanceSet[0].InstanceId != poolB[1] {
		t.Fatalf("describe with unknown id: %+v %v", r, err)
	}

	_, err = describe(map[string][]string{"tag:pool": {"a"}}, 0, 101)
	wantCode(t, err, CodeParamValueLimitExceeded)
	_, err = describe(map[string][]string{"colour": {"red"}}, 0, 10)
	wantCode(t, err, CodeInvalidFilter)
	_, err = describe(map[string][]string{"zone": {"a", "b", "c", "d", "e", "f"}}, 0, 10)
	wantCode(t, err, CodeFilterValueLimitExceeded)
	_, err = describe(nil, -1, 10)
	wantCode(t, err, CodeParamValueRange)
	many := make([]string, 101)
	for i := range many {
		many[i] = fmt.Sprintf("ins-%08d", i)
	}
	_, err = describeIDs(c, many)
	wantCode(t, err, CodeParamValueLimitExceeded)
	req := cvm.NewDescribeInstancesRequest()
	req.InstanceIds = common.StringPtrs(poolA[:1])
	req.Filters = []*cvm.Filter{{Name: common.StringPtr("zone"), Values: common.StringPtrs([]string{testZone})}}
	_, err = c.DescribeInstances(req)
	wantCode(t, err, CodeInvalidParameter)
}

func TestLaunchPolicy(t *testing.T) {
	cfg := testConfig()
	cfg.Launch = LaunchPolicy{FailZones: []string{"ap-guangzhou-6"}, HangInstanceTypes: []string{"S5.SMALL1"}}
	s := startServer(t, cfg)
	c := sdkClient(t, s, testSecretID, testKey)

	failed, err := runInstances(c, runOpts{zone: "ap-guangzhou-6"})
	if err != nil {
		t.Fatal(err)
	}
	hung, err := runInstances(c, runOpts{itype: "S5.SMALL1"})
	if err != nil {
		t.Fatal(err)
	}
	ok, err := runInstances(c, runOpts{})
	if err != nil {
		t.Fatal(err)
	}
	insts := waitState(t, c, failed, StateLaunchFailed)
	if *insts[0].LatestOperationState != "FAILED" || len(insts[0].PrivateIpAddresses) != 0 {
		t.Errorf("failed VM: %s, IPs %v", *insts[0].LatestOperationState, insts[0].PrivateIpAddresses)
	}
	waitState(t, c, ok, StateRunning)
	// Same boot delay as the VM that is already RUNNING, yet still PENDING.
	waitState(t, c, hung, StatePending)

	// A failure rate of 1 fails everything; policies apply to new launches.
	s.SetLaunchPolicy(LaunchPolicy{FailureRate: 1})
	ids, err := runInstances(c, runOpts{count: 3})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, c, ids, StateLaunchFailed)
	if st := s.Stats(); st.VMsLaunchFailed != 4 {
		t.Errorf("launch failures = %d, want 4", st.VMsLaunchFailed)
	}
	// Failed and hung VMs can be terminated like any other.
	if err := terminate(c, append(ids, hung...)...); err != nil {
		t.Fatal(err)
	}
}

func TestCloseStopsPendingWork(t *testing.T) {
	cfg := testConfig()
	cfg.BootDelay = time.Hour
	s, err := Start("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := sdkClient(t, s, testSecretID, testKey)
	if _, err := runInstances(c, runOpts{count: 10}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Close hung on pending boot timers")
	}
	if err := s.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
}
