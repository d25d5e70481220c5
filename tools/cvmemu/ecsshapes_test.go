package cvmemu

import (
	"net/http"
	"slices"
	"testing"

	ecs "github.com/alibabacloud-go/ecs-20140526/v7/client"
	"github.com/alibabacloud-go/tea/dara"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"
)

// TestECSDescribeInstanceTypes: the table's ECS types with their shapes
// through the SDK, filtered by InstanceTypes.N, family and architecture,
// paged by MaxResults and NextToken; bad parameters are refused as ECS
// does.
func TestECSDescribeInstanceTypes(t *testing.T) {
	s := startECS(t, testConfig())
	c := ecsClient(t, s, testSecretID, testKey)
	describe := func(r *ecs.DescribeInstanceTypesRequest) (*ecs.DescribeInstanceTypesResponseBody, error) {
		resp, err := c.DescribeInstanceTypes(r)
		if err != nil {
			return nil, err
		}
		return resp.Body, nil
	}
	body, err := describe(&ecs.DescribeInstanceTypesRequest{
		InstanceTypes: dara.StringSlice([]string{"ecs.g7.large", "ecs.g8y.large", "ecs.gn7i-c8g1.2xlarge", "ecs.g6.xlarge", "ecs.nosuch", "S5.MEDIUM4"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	type shape struct {
		family, arch, gpuSpec string
		cpu, gpu              int32
		mem                   float32
	}
	got := map[string]shape{}
	for _, it := range body.InstanceTypes.InstanceType {
		got[dara.StringValue(it.InstanceTypeId)] = shape{
			family: dara.StringValue(it.InstanceTypeFamily), arch: dara.StringValue(it.CpuArchitecture), gpuSpec: dara.StringValue(it.GPUSpec),
			cpu: dara.Int32Value(it.CpuCoreCount), gpu: dara.Int32Value(it.GPUAmount), mem: dara.Float32Value(it.MemorySize),
		}
	}
	want := map[string]shape{
		"ecs.g7.large":          {family: "ecs.g7", arch: "X86", cpu: 2, mem: 8},
		"ecs.g8y.large":         {family: "ecs.g8y", arch: "ARM", cpu: 2, mem: 8},
		"ecs.gn7i-c8g1.2xlarge": {family: "ecs.gn7i", arch: "X86", gpuSpec: "NVIDIA A10", cpu: 8, gpu: 1, mem: 30},
		// Not in the table, its name gives its shape.
		"ecs.g6.xlarge": {family: "ecs.g6", arch: "X86", cpu: 4, mem: 16},
	}
	if len(got) != len(want) {
		t.Fatalf("DescribeInstanceTypes = %+v, want %+v (unknown and CVM names left out)", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %+v, want %+v", k, got[k], w)
		}
	}
	if dara.StringValue(body.NextToken) != "" {
		t.Errorf("NextToken %q on the only page", dara.StringValue(body.NextToken))
	}

	// Filters: ARM only.
	body, err = describe(&ecs.DescribeInstanceTypesRequest{CpuArchitecture: dara.String("ARM")})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range body.InstanceTypes.InstanceType {
		if dara.StringValue(it.CpuArchitecture) != "ARM" {
			t.Errorf("CpuArchitecture=ARM lists %s (%s)", dara.StringValue(it.InstanceTypeId), dara.StringValue(it.CpuArchitecture))
		}
	}
	if len(body.InstanceTypes.InstanceType) == 0 {
		t.Error("no ARM type listed")
	}

	// Paging: every ECS type of the table once, two at a time.
	var paged []string
	var token *string
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatal("NextToken never ends")
		}
		body, err = describe(&ecs.DescribeInstanceTypesRequest{MaxResults: dara.Int64(2), NextToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(body.InstanceTypes.InstanceType); n > 2 {
			t.Fatalf("page of %d with MaxResults 2", n)
		}
		for _, it := range body.InstanceTypes.InstanceType {
			paged = append(paged, dara.StringValue(it.InstanceTypeId))
		}
		if dara.StringValue(body.NextToken) == "" {
			break
		}
		token = body.NextToken
	}
	var table []string
	for _, it := range DefaultInstanceTypes() {
		if IsECSType(it.InstanceType) {
			table = append(table, it.InstanceType)
		}
	}
	if !slices.Equal(paged, table) {
		t.Fatalf("paged %v, want %v", paged, table)
	}

	for name, tc := range map[string]struct {
		req  *ecs.DescribeInstanceTypesRequest
		code string
	}{
		"11 types":        {&ecs.DescribeInstanceTypesRequest{InstanceTypes: dara.StringSlice(make([]string, 11))}, ecsCodeInvalidParameter},
		"empty type":      {&ecs.DescribeInstanceTypesRequest{InstanceTypes: dara.StringSlice([]string{""})}, ecsCodeInvalidParameter},
		"MaxResults 0":    {&ecs.DescribeInstanceTypesRequest{MaxResults: dara.Int64(0)}, ecsCodeInvalidParameter},
		"MaxResults 1601": {&ecs.DescribeInstanceTypesRequest{MaxResults: dara.Int64(1601)}, ecsCodeInvalidParameter},
		"bad token":       {&ecs.DescribeInstanceTypesRequest{NextToken: dara.String("garbage!")}, ecsCodeNextTokenMalformed},
		"bad arch":        {&ecs.DescribeInstanceTypesRequest{CpuArchitecture: dara.String("MIPS")}, ecsCodeInvalidParameter},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := describe(tc.req)
			wantECSErr(t, err, tc.code, http.StatusBadRequest)
		})
	}
}

// TestECSDescribeAvailableResource: the ECS types a zone sells, with the
// stock-out rules' stock status; a type the zone does not offer is left
// out; bad parameters are refused as ECS does.
func TestECSDescribeAvailableResource(t *testing.T) {
	cfg := testConfig()
	cfg.Zones = []string{"cn-hangzhou-h", "cn-hangzhou-i", "cn-shanghai-b"}
	cfg.StockOuts = []StockOut{
		{Zone: "cn-hangzhou-h", InstanceType: "ecs.c7.large"},                                    // sold out
		{Zone: "cn-hangzhou-h", InstanceType: "ecs.r7.large", Code: ECSCodeResourceNotSupported}, // not offered
		{Zone: "cn-hangzhou-h", InstanceType: "ecs.g7.xlarge", AtLaunch: true},                   // fails later
	}
	s := startECS(t, cfg)
	c := ecsClient(t, s, testSecretID, testKey)
	available := func(r *ecs.DescribeAvailableResourceRequest) (map[string]map[string][2]string, error) {
		if r.RegionId == nil {
			r.RegionId = dara.String(ecsRegion)
		}
		resp, err := c.DescribeAvailableResource(r)
		if err != nil {
			return nil, err
		}
		out := map[string]map[string][2]string{}
		for _, z := range resp.Body.AvailableZones.AvailableZone {
			if dara.StringValue(z.RegionId) != dara.StringValue(r.RegionId) {
				t.Errorf("zone %s in region %s", dara.StringValue(z.ZoneId), dara.StringValue(z.RegionId))
			}
			m := map[string][2]string{}
			for _, ar := range z.AvailableResources.AvailableResource {
				if dara.StringValue(ar.Type) != "InstanceType" {
					t.Errorf("resource type %s", dara.StringValue(ar.Type))
				}
				for _, sr := range ar.SupportedResources.SupportedResource {
					m[dara.StringValue(sr.Value)] = [2]string{dara.StringValue(sr.Status), dara.StringValue(sr.StatusCategory)}
				}
			}
			out[dara.StringValue(z.ZoneId)] = m
		}
		return out, nil
	}
	got, err := available(&ecs.DescribeAvailableResourceRequest{DestinationResource: dara.String("InstanceType")})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["cn-hangzhou-h"] == nil || got["cn-hangzhou-i"] == nil {
		t.Fatalf("zones %v, want cn-hangzhou-h and -i", slices.Collect(mapKeys(got)))
	}
	h := got["cn-hangzhou-h"]
	for typ, want := range map[string][2]string{
		"ecs.g7.large":  {ECSResourceAvailable, ECSStockWithStock},
		"ecs.c7.large":  {ECSResourceSoldOut, ECSStockWithoutStock},
		"ecs.g7.xlarge": {ECSResourceAvailable, ECSStockWithStock},
		"ecs.g8y.large": {ECSResourceAvailable, ECSStockWithStock},
	} {
		if h[typ] != want {
			t.Errorf("cn-hangzhou-h %s = %v, want %v", typ, h[typ], want)
		}
	}
	if _, ok := h["ecs.r7.large"]; ok {
		t.Error("cn-hangzhou-h lists ecs.r7.large, which it does not offer")
	}
	if _, ok := h["S5.MEDIUM4"]; ok {
		t.Error("a CVM type listed by ECS")
	}
	if i := got["cn-hangzhou-i"]; i["ecs.c7.large"] != [2]string{ECSResourceAvailable, ECSStockWithStock} || i["ecs.r7.large"][0] != ECSResourceAvailable {
		t.Errorf("cn-hangzhou-i = %v: the other zone's stock-outs leaked", i)
	}

	// One zone, one type; spot leaves out the types that cannot be spot.
	got, err = available(&ecs.DescribeAvailableResourceRequest{DestinationResource: dara.String("InstanceType"),
		ZoneId: dara.String("cn-hangzhou-h"), InstanceType: dara.String("ecs.c7.large")})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got["cn-hangzhou-h"]) != 1 || got["cn-hangzhou-h"]["ecs.c7.large"][0] != ECSResourceSoldOut {
		t.Fatalf("one zone and type = %v", got)
	}
	got, err = available(&ecs.DescribeAvailableResourceRequest{DestinationResource: dara.String("InstanceType"),
		ZoneId: dara.String("cn-hangzhou-i"), SpotStrategy: dara.String("SpotAsPriceGo")})
	if err != nil {
		t.Fatal(err)
	}
	if i := got["cn-hangzhou-i"]; len(i) == 0 || i["ecs.gn7i-c8g1.2xlarge"] != [2]string{} || i["ecs.g7.large"][0] != ECSResourceAvailable {
		t.Fatalf("spot = %v, want the spot types without gn7i", i)
	}
	// Every type of a zone sold out: the zone is SoldOut.
	s.SetSoldOut(StockOut{Zone: "cn-hangzhou-i"})
	resp, err := c.DescribeAvailableResource(&ecs.DescribeAvailableResourceRequest{RegionId: dara.String(ecsRegion),
		DestinationResource: dara.String("InstanceType"), ZoneId: dara.String("cn-hangzhou-i")})
	if err != nil {
		t.Fatal(err)
	}
	if zs := resp.Body.AvailableZones.AvailableZone; len(zs) != 1 || dara.StringValue(zs[0].Status) != ECSResourceSoldOut ||
		dara.StringValue(zs[0].StatusCategory) != ECSStockWithoutStock {
		t.Fatalf("sold-out zone = %v", resp.Body)
	}

	for name, tc := range map[string]struct {
		req    *ecs.DescribeAvailableResourceRequest
		code   string
		status int
	}{
		"no destination":  {&ecs.DescribeAvailableResourceRequest{}, ecsCodeMissingParameter, http.StatusBadRequest},
		"bad destination": {&ecs.DescribeAvailableResourceRequest{DestinationResource: dara.String("Types")}, ecsCodeInvalidParameter, http.StatusBadRequest},
		"bad charge type": {&ecs.DescribeAvailableResourceRequest{DestinationResource: dara.String("InstanceType"), InstanceChargeType: dara.String("Free")}, ecsCodeChargeTypeNotSupported, http.StatusBadRequest},
		"bad spot":        {&ecs.DescribeAvailableResourceRequest{DestinationResource: dara.String("InstanceType"), SpotStrategy: dara.String("Cheap")}, ecsCodeSpotStrategyInvalid, http.StatusBadRequest},
		"prepaid spot":    {&ecs.DescribeAvailableResourceRequest{DestinationResource: dara.String("InstanceType"), InstanceChargeType: dara.String("PrePaid"), SpotStrategy: dara.String("SpotAsPriceGo")}, ecsCodeChargeTypeNotSupported, http.StatusBadRequest},
		"bad resource":    {&ecs.DescribeAvailableResourceRequest{DestinationResource: dara.String("InstanceType"), ResourceType: dara.String("vm")}, ecsCodeInvalidParameter, http.StatusBadRequest},
		"zone elsewhere":  {&ecs.DescribeAvailableResourceRequest{DestinationResource: dara.String("InstanceType"), ZoneId: dara.String("cn-shanghai-b")}, ecsCodeZoneNotFound, http.StatusNotFound},
		"no region":       {&ecs.DescribeAvailableResourceRequest{RegionId: dara.String(""), DestinationResource: dara.String("InstanceType")}, ecsCodeMissingParameter, http.StatusBadRequest},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.req.RegionId == nil {
				tc.req.RegionId = dara.String(ecsRegion)
			}
			_, err := c.DescribeAvailableResource(tc.req)
			wantECSErr(t, err, tc.code, tc.status)
		})
	}
}

// TestECSTypesStayOutOfCVM: the table's ECS rows are not in CVM's
// catalogue, even when named.
func TestECSTypesStayOutOfCVM(t *testing.T) {
	s := startServer(t, testConfig())
	c := sdkClient(t, s, testSecretID, testKey)
	r := cvm.NewDescribeZoneInstanceConfigInfosRequest()
	r.Filters = []*cvm.Filter{
		{Name: dara.String("zone"), Values: dara.StringSlice([]string{"ap-guangzhou-3"})},
		{Name: dara.String("instance-type"), Values: dara.StringSlice([]string{"ecs.g7.large", "S5.MEDIUM4"})},
	}
	resp, err := c.DescribeZoneInstanceConfigInfos(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range resp.Response.InstanceTypeQuotaSet {
		if IsECSType(dara.StringValue(it.InstanceType)) {
			t.Fatalf("CVM lists %s", dara.StringValue(it.InstanceType))
		}
	}
	if len(resp.Response.InstanceTypeQuotaSet) == 0 {
		t.Fatal("S5.MEDIUM4 not listed")
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
