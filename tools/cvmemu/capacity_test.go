package cvmemu

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"
)

// The real codes a zone/type stock-out answers with, each checked
// against the SDK's errors list, so a renamed constant fails the build.
var realStockOutCodes = []string{
	cvm.RESOURCEINSUFFICIENT_SPECIFIEDINSTANCETYPE,
	cvm.RESOURCEINSUFFICIENT_ZONESOLDOUTFORSPECIFIEDINSTANCE,
	cvm.RESOURCESSOLDOUT_SPECIFIEDINSTANCETYPE,
	cvm.RESOURCEINSUFFICIENT_AVAILABILITYZONESOLDOUT,
	cvm.RESOURCESSOLDOUT_AVAILABLEZONE,
	cvm.INVALIDPARAMETERVALUE_INSUFFICIENTOFFERING,
}

func TestStockOutPerZoneAndTypeWithRealCodes(t *testing.T) {
	s := startServer(t, testConfig())
	c := sdkClient(t, s, testSecretID, testKey)
	if CodeInsufficientInstanceType != cvm.RESOURCEINSUFFICIENT_SPECIFIEDINSTANCETYPE ||
		CodeZoneSoldOutForType != cvm.RESOURCEINSUFFICIENT_ZONESOLDOUTFORSPECIFIEDINSTANCE ||
		CodeSoldOutInstanceType != cvm.RESOURCESSOLDOUT_SPECIFIEDINSTANCETYPE ||
		CodeSpotInsufficientOffering != cvm.INVALIDPARAMETERVALUE_INSUFFICIENTOFFERING ||
		CodeSpotInsufficientPrice != cvm.INVALIDPARAMETERVALUE_INSUFFICIENTPRICE ||
		CodeSpotUnsupportedType != cvm.UNSUPPORTEDOPERATION_NOINSTANCETYPESUPPORTSPOT {
		t.Fatal("an emulator error code differs from the SDK's")
	}
	for _, code := range realStockOutCodes {
		s.SetSoldOut(StockOut{Zone: testZone, InstanceType: "S5.MEDIUM4", Code: code})
		_, err := runInstances(c, runOpts{itype: "S5.MEDIUM4"})
		wantCode(t, err, code)
		if !strings.Contains(err.Error(), "S5.MEDIUM4") || !strings.Contains(err.Error(), testZone) {
			t.Errorf("message does not name type and zone: %v", err)
		}
	}
	// Only that zone and type.
	if _, err := runInstances(c, runOpts{itype: "S5.LARGE8"}); err != nil {
		t.Fatalf("other type in the zone: %v", err)
	}
	if _, err := runInstances(c, runOpts{itype: "S5.MEDIUM4", zone: "ap-guangzhou-4"}); err != nil {
		t.Fatalf("same type in another zone: %v", err)
	}
	if len(s.StockOuts()) != 1 {
		t.Fatalf("SetSoldOut for the same zone and type must replace the rule: %+v", s.StockOuts())
	}
	// Default code, and cleared.
	s.SetSoldOut(StockOut{Zone: testZone, InstanceType: "S5.MEDIUM4"})
	_, err := runInstances(c, runOpts{itype: "S5.MEDIUM4"})
	wantCode(t, err, CodeInsufficientInstanceType)
	if !s.ClearSoldOut(testZone, "S5.MEDIUM4") || s.ClearSoldOut(testZone, "S5.MEDIUM4") {
		t.Fatal("ClearSoldOut must report the rule once")
	}
	if _, err := runInstances(c, runOpts{itype: "S5.MEDIUM4"}); err != nil {
		t.Fatalf("after the clear: %v", err)
	}
	// A spot-only stock-out leaves on-demand launches alone.
	s.SetSoldOut(StockOut{Zone: testZone, InstanceType: "S5.MEDIUM4", ChargeType: ChargeTypeSpot, Code: CodeSpotInsufficientOffering})
	if _, err := runInstances(c, runOpts{itype: "S5.MEDIUM4"}); err != nil {
		t.Fatalf("on-demand during a spot stock-out: %v", err)
	}
	_, err = runSpot(c, "S5.MEDIUM4", spotOpts())
	wantCode(t, err, CodeSpotInsufficientOffering)
}

func TestLaunchFailedForCapacity(t *testing.T) {
	s := startServer(t, testConfig())
	c := sdkClient(t, s, testSecretID, testKey)
	s.SetSoldOut(StockOut{Zone: testZone, InstanceType: "S5.LARGE8", Code: CodeZoneSoldOutForType, AtLaunch: true})
	ids, err := runInstances(c, runOpts{itype: "S5.LARGE8", count: 2})
	if err != nil {
		t.Fatalf("an at-launch stock-out accepts the call: %v", err)
	}
	for _, in := range waitState(t, c, ids, StateLaunchFailed) {
		if got := deref(in.LatestOperationState); got != "FAILED" {
			t.Errorf("LatestOperationState = %q, want FAILED", got)
		}
		msg := deref(in.LatestOperationErrorMsg)
		if !strings.HasPrefix(msg, CodeZoneSoldOutForType+": ") || !strings.Contains(msg, "S5.LARGE8") || !strings.Contains(msg, testZone) {
			t.Errorf("LatestOperationErrorMsg = %q: want the code, type and zone", msg)
		}
	}
	// The catalogue does not know yet: SELL.
	items := zoneConfigs(t, c, map[string][]string{"zone": {testZone}, "instance-type": {"S5.LARGE8"}})
	if len(items) == 0 || deref(items[0].Status) != "SELL" {
		t.Fatalf("at-launch stock-out shows in the catalogue: %+v", items)
	}
	// Other VMs still boot; the failed ones are terminated like any VM.
	ok, err := runInstances(c, runOpts{itype: "S5.MEDIUM4"})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, c, ok, StateRunning)
	if err := terminate(c, ids...); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.VMsLaunchFailed != 2 {
		t.Errorf("VMsLaunchFailed = %d, want 2", st.VMsLaunchFailed)
	}
}

func zoneConfigs(t *testing.T, c *cvm.Client, filters map[string][]string) []*cvm.InstanceTypeQuotaItem {
	t.Helper()
	req := cvm.NewDescribeZoneInstanceConfigInfosRequest()
	for name, vals := range filters {
		req.Filters = append(req.Filters, &cvm.Filter{Name: common.StringPtr(name), Values: common.StringPtrs(vals)})
	}
	resp, err := c.DescribeZoneInstanceConfigInfos(req)
	if err != nil {
		t.Fatalf("DescribeZoneInstanceConfigInfos(%v): %v", filters, err)
	}
	return resp.Response.InstanceTypeQuotaSet
}

func TestDescribeZoneInstanceConfigInfos(t *testing.T) {
	cfg := testConfig()
	cfg.Zones = []string{"ap-guangzhou-3", "ap-guangzhou-4", "ap-shanghai-2"}
	s := startServer(t, cfg)
	c := sdkClient(t, s, testSecretID, testKey)
	s.SetSoldOut(StockOut{Zone: "ap-guangzhou-4", InstanceType: "S5.MEDIUM4"})

	items := zoneConfigs(t, c, map[string][]string{"instance-type": {"S5.MEDIUM4", "SR1.MEDIUM4", "GN7.2XLARGE32"}})
	type key struct{ zone, typ, charge string }
	got := map[key]*cvm.InstanceTypeQuotaItem{}
	for _, it := range items {
		got[key{deref(it.Zone), deref(it.InstanceType), deref(it.InstanceChargeType)}] = it
	}
	// 2 zones of the region × (S5 and SR1 on demand and spot, GN7 on demand only).
	if len(items) != 10 {
		t.Fatalf("got %d items, want 10: %v", len(items), got)
	}
	s5 := got[key{"ap-guangzhou-3", "S5.MEDIUM4", ChargeTypeOnDemand}]
	if s5 == nil || *s5.Cpu != 2 || *s5.Memory != 4 || deref(s5.InstanceFamily) != "S5" || deref(s5.Status) != "SELL" || *s5.Gpu != 0 {
		t.Fatalf("S5.MEDIUM4 in zone 3: %+v", s5)
	}
	if sold := got[key{"ap-guangzhou-4", "S5.MEDIUM4", ChargeTypeSpot}]; sold == nil || deref(sold.Status) != "SOLD_OUT" || deref(sold.StatusCategory) != "WithoutStock" {
		t.Fatalf("sold-out zone 4: %+v", sold)
	}
	if arm := got[key{"ap-guangzhou-3", "SR1.MEDIUM4", ChargeTypeOnDemand}]; arm == nil || !strings.Contains(deref(arm.CpuType), "Ampere") {
		t.Fatalf("SR1 should name its ARM CPU: %+v", arm)
	}
	gpu := got[key{"ap-guangzhou-3", "GN7.2XLARGE32", ChargeTypeOnDemand}]
	if gpu == nil || *gpu.Gpu != 1 || *gpu.GpuCount != 1 || *gpu.Cpu != 8 || *gpu.Memory != 32 {
		t.Fatalf("GN7: %+v", gpu)
	}
	if got[key{"ap-guangzhou-3", "GN7.2XLARGE32", ChargeTypeSpot}] != nil {
		t.Fatal("GN7 is not sold as spot")
	}
	// Filters by zone and charge type.
	items = zoneConfigs(t, c, map[string][]string{"zone": {"ap-guangzhou-3"}, "instance-charge-type": {ChargeTypeSpot}, "instance-family": {"S5"}})
	for _, it := range items {
		if deref(it.Zone) != "ap-guangzhou-3" || deref(it.InstanceChargeType) != ChargeTypeSpot || deref(it.InstanceFamily) != "S5" {
			t.Fatalf("filter ignored: %+v", it)
		}
	}
	if len(items) == 0 {
		t.Fatal("no S5 spot items in zone 3")
	}
	// Bad filters answer as the real API.
	r := sendRaw(t, s, rawRequest{action: ActionDescribeZoneInstanceConfigInfos, body: `{"Filters":[{"Name":"cpu","Values":["2"]}]}`})
	if r.code() != CodeInvalidFilter {
		t.Fatalf("unknown filter: %q", r.code())
	}
	r = sendRaw(t, s, rawRequest{action: ActionDescribeZoneInstanceConfigInfos, body: `{"Bogus":1}`})
	if r.code() != CodeUnknownParameter {
		t.Fatalf("unknown parameter: %q", r.code())
	}
}

func TestDescribeZoneInstanceConfigInfosWithoutConfiguredZones(t *testing.T) {
	s := startServer(t, testConfig())
	c := sdkClient(t, s, testSecretID, testKey)
	items := zoneConfigs(t, c, map[string][]string{"zone": {"ap-guangzhou-7"}, "instance-type": {"S5.4XLARGE64"}})
	if len(items) != 2 || *items[0].Cpu != 16 || *items[0].Memory != 64 {
		t.Fatalf("a type outside the table is described from its name: %+v", items)
	}
	r := sendRaw(t, s, rawRequest{action: ActionDescribeZoneInstanceConfigInfos, body: `{"Filters":[{"Name":"zone","Values":["ap-shanghai-1"]}]}`})
	if r.code() != CodeZoneMismatchRegion {
		t.Fatalf("zone of another region: %q", r.code())
	}
}

func spotOpts() *cvm.InstanceMarketOptionsRequest {
	return &cvm.InstanceMarketOptionsRequest{
		MarketType:  common.StringPtr("spot"),
		SpotOptions: &cvm.SpotMarketOptions{MaxPrice: common.StringPtr("0.5"), SpotInstanceType: common.StringPtr("one-time")},
	}
}

func runSpot(c *cvm.Client, itype string, mo *cvm.InstanceMarketOptionsRequest) ([]string, error) {
	req := cvm.NewRunInstancesRequest()
	req.Placement = &cvm.Placement{Zone: common.StringPtr(testZone)}
	req.ImageId = common.StringPtr(testImage)
	req.InstanceType = common.StringPtr(itype)
	req.InstanceChargeType = common.StringPtr(ChargeTypeSpot)
	req.InstanceMarketOptions = mo
	resp, err := c.RunInstances(req)
	if err != nil {
		return nil, err
	}
	return common.StringValues(resp.Response.InstanceIdSet), nil
}

func TestSpotRunInstancesValidation(t *testing.T) {
	s := startServer(t, testConfig())
	c := sdkClient(t, s, testSecretID, testKey)
	mod := func(f func(*cvm.InstanceMarketOptionsRequest)) *cvm.InstanceMarketOptionsRequest {
		mo := spotOpts()
		f(mo)
		return mo
	}
	cases := []struct {
		name  string
		itype string
		mo    *cvm.InstanceMarketOptionsRequest
		code  string
	}{
		{"no market options", "S5.MEDIUM4", nil, CodeMissingParameter},
		{"no market type", "S5.MEDIUM4", mod(func(m *cvm.InstanceMarketOptionsRequest) { m.MarketType = nil }), CodeMissingParameter},
		{"wrong market type", "S5.MEDIUM4", mod(func(m *cvm.InstanceMarketOptionsRequest) { m.MarketType = common.StringPtr("Spot") }), CodeInvalidParameterValue},
		{"no spot options", "S5.MEDIUM4", mod(func(m *cvm.InstanceMarketOptionsRequest) { m.SpotOptions = nil }), CodeMissingParameter},
		{"no max price", "S5.MEDIUM4", mod(func(m *cvm.InstanceMarketOptionsRequest) { m.SpotOptions.MaxPrice = nil }), CodeMissingParameter},
		{"bad max price", "S5.MEDIUM4", mod(func(m *cvm.InstanceMarketOptionsRequest) { m.SpotOptions.MaxPrice = common.StringPtr("cheap") }), CodeInvalidParameterValue},
		{"negative max price", "S5.MEDIUM4", mod(func(m *cvm.InstanceMarketOptionsRequest) { m.SpotOptions.MaxPrice = common.StringPtr("-1") }), CodeInvalidParameterValue},
		{"persistent", "S5.MEDIUM4", mod(func(m *cvm.InstanceMarketOptionsRequest) {
			m.SpotOptions.SpotInstanceType = common.StringPtr("persistent")
		}), CodeInvalidParameterValue},
		{"below the spot price", "S5.MEDIUM4", mod(func(m *cvm.InstanceMarketOptionsRequest) { m.SpotOptions.MaxPrice = common.StringPtr("0.001") }), CodeSpotInsufficientPrice},
		{"type without spot", "GN7.2XLARGE32", spotOpts(), CodeSpotUnsupportedType},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runSpot(c, tc.itype, tc.mo)
			wantCode(t, err, tc.code)
		})
	}
	// Market options on an on-demand launch.
	req := cvm.NewRunInstancesRequest()
	req.Placement = &cvm.Placement{Zone: common.StringPtr(testZone)}
	req.ImageId = common.StringPtr(testImage)
	req.InstanceMarketOptions = spotOpts()
	_, err := c.RunInstances(req)
	wantCode(t, err, CodeInvalidParameterValue)

	// Valid, SpotInstanceType omitted too: SPOTPAID instances.
	ids, err := runSpot(c, "S5.MEDIUM4", mod(func(m *cvm.InstanceMarketOptionsRequest) { m.SpotOptions.SpotInstanceType = nil }))
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range waitState(t, c, ids, StateRunning) {
		if deref(in.InstanceChargeType) != ChargeTypeSpot {
			t.Fatalf("InstanceChargeType = %q", deref(in.InstanceChargeType))
		}
	}
	if vm, _ := s.VM(ids[0]); !vm.Spot {
		t.Fatal("VMInfo.Spot not set")
	}
	if st := s.Stats(); st.VMsCreated != 1 {
		t.Fatalf("refused spot requests created VMs: %d", st.VMsCreated)
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func httpDo(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: answer is not JSON: %v", method, url, err)
	}
	return resp.StatusCode, out
}

func TestSpotReclaimAndMetadata(t *testing.T) {
	s := startServer(t, testConfig())
	c := sdkClient(t, s, testSecretID, testKey)
	meta, err := s.ServeMetadata("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := s.ServeAdmin("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := runSpot(c, "S5.MEDIUM4", spotOpts())
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, c, ids, StateRunning)
	id := ids[0]
	od, err := runInstances(c, runOpts{})
	if err != nil {
		t.Fatal(err)
	}

	if code, body := httpGet(t, meta+"/"+id+"/latest/meta-data/instance-id"); code != 200 || body != id {
		t.Fatalf("instance-id: %d %q", code, body)
	}
	if code, _ := httpGet(t, meta+"/"+id+"/latest/meta-data/spot/termination-time"); code != http.StatusNotFound {
		t.Fatalf("termination-time before a reclaim: %d, want 404", code)
	}
	if code, _ := httpGet(t, meta+"/ins-00000000/latest/meta-data/instance-id"); code != http.StatusNotFound {
		t.Fatalf("unknown VM: %d, want 404", code)
	}

	// Admin API errors name the field.
	if code, out := httpDo(t, http.MethodPost, admin+"/reclaim", `{"instanceId":"`+id+`"}`); code != 400 || !strings.Contains(out["error"].(string), "inSeconds") {
		t.Fatalf("reclaim without inSeconds: %d %v", code, out)
	}
	if code, _ := httpDo(t, http.MethodPost, admin+"/reclaim", `{"instanceId":"`+od[0]+`","inSeconds":1}`); code != http.StatusConflict {
		t.Fatalf("reclaiming an on-demand VM: %d, want 409", code)
	}
	if code, _ := httpDo(t, http.MethodPost, admin+"/reclaim", `{"instanceId":"ins-00000000","inSeconds":1}`); code != http.StatusNotFound {
		t.Fatalf("reclaiming an unknown VM: %d, want 404", code)
	}

	// A reclaim in an hour: announced at once, in Tencent's format (UTC+8).
	before := time.Now()
	code, out := httpDo(t, http.MethodPost, admin+"/reclaim", `{"instanceId":"`+id+`","inSeconds":3600}`)
	if code != 200 {
		t.Fatalf("reclaim: %d %v", code, out)
	}
	code, body := httpGet(t, meta+"/"+id+"/latest/meta-data/spot/termination-time")
	if code != 200 {
		t.Fatalf("termination-time after the notice: %d", code)
	}
	at, err := time.ParseInLocation("2006-01-02 15:04:05", body, time.FixedZone("UTC+8", 8*3600))
	if err != nil {
		t.Fatalf("termination-time %q is not in Tencent's format: %v", body, err)
	}
	if d := at.Sub(before); d < time.Hour-time.Second || d > time.Hour+time.Minute {
		t.Fatalf("termination-time %v is %v after the request, want about an hour", at, d)
	}
	if vm, _ := s.VM(id); vm.State != StateRunning || !vm.TerminationTime.Equal(at) {
		t.Fatalf("the notice alone must not stop the VM: %+v", vm)
	}
	// Moved to one second from now: the VM is terminated then.
	if code, out := httpDo(t, http.MethodPost, admin+"/reclaim", `{"instanceId":"`+id+`","inSeconds":1}`); code != 200 {
		t.Fatalf("reclaim again: %d %v", code, out)
	}
	// Then the VM is terminated, and only it.
	waitGone(t, c, id)
	if st := s.Stats(); st.VMsReclaimed != 1 {
		t.Fatalf("VMsReclaimed = %d", st.VMsReclaimed)
	}
	waitState(t, c, od, StateRunning)
	if code, _ := httpGet(t, meta+"/"+id+"/latest/meta-data/instance-id"); code != http.StatusNotFound {
		t.Fatalf("a gone VM's metadata: %d, want 404", code)
	}
}

// waitGone polls until DescribeInstances no longer lists id.
func waitGone(t *testing.T, c *cvm.Client, id string) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		resp, err := describeIDs(c, []string{id})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.InstanceSet) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("VM %s still listed: %s", id, deref(resp.InstanceSet[0].InstanceState))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAdminStockOuts(t *testing.T) {
	s := startServer(t, testConfig())
	c := sdkClient(t, s, testSecretID, testKey)
	admin, err := s.ServeAdmin("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if code, out := httpDo(t, http.MethodPost, admin+"/stockouts", `{"zone":"`+testZone+`","instanceType":"S5.MEDIUM4","code":"`+CodeZoneSoldOutForType+`"}`); code != 200 {
		t.Fatalf("mark sold out: %d %v", code, out)
	}
	_, err = runInstances(c, runOpts{itype: "S5.MEDIUM4"})
	wantCode(t, err, CodeZoneSoldOutForType)
	if code, out := httpDo(t, http.MethodPost, admin+"/stockouts", `{"zone":"`+testZone+`","typo":1}`); code != 400 || !strings.Contains(out["error"].(string), "typo") {
		t.Fatalf("unknown field: %d %v", code, out)
	}
	if code, out := httpDo(t, http.MethodPost, admin+"/stockouts", `{}`); code != 400 {
		t.Fatalf("rule for everything: %d %v", code, out)
	}
	if code, _ := httpDo(t, http.MethodDelete, admin+"/stockouts?zone="+testZone+"&instanceType=S5.MEDIUM4", ""); code != 200 {
		t.Fatalf("clear: %d", code)
	}
	if code, _ := httpDo(t, http.MethodDelete, admin+"/stockouts?zone="+testZone+"&instanceType=S5.MEDIUM4", ""); code != 404 {
		t.Fatalf("clear again: %d, want 404", code)
	}
	if _, err := runInstances(c, runOpts{itype: "S5.MEDIUM4"}); err != nil {
		t.Fatalf("after the clear: %v", err)
	}
}

// A scheduled reclaim and the spot options survive a restart.
func TestSpotReclaimSurvivesRestart(t *testing.T) {
	cfg := testConfig()
	cfg.StateFile = filepath.Join(t.TempDir(), "state.json")
	s, err := Start("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := sdkClient(t, s, testSecretID, testKey)
	ids, err := runSpot(c, "S5.MEDIUM4", spotOpts())
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, c, ids, StateRunning)
	at, err := s.ScheduleReclaim(ids[0], time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := startServer(t, cfg)
	vm, ok := s2.VM(ids[0])
	if !ok || !vm.Spot || !vm.TerminationTime.Equal(at) {
		t.Fatalf("after restart: %+v (want termination %v)", vm, at)
	}
	// Moving the reclaim to now terminates it.
	if _, err := s2.ScheduleReclaim(ids[0], 0); err != nil {
		t.Fatal(err)
	}
	waitGone(t, sdkClient(t, s2, testSecretID, testKey), ids[0])
}
