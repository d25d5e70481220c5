package cloudspec

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/libs/cloudspec/internal/alibabaecs"
	"github.com/nodesmith/nodesmith/libs/cloudspec/internal/tencentcvm"
)

func TestReconcile(t *testing.T) {
	for _, tc := range []struct {
		name, provider string
		in             Template
		want           Template
		errs           []FieldError
	}{
		{"tencent: nothing", Tencent, Template{}, Template{}, nil},
		{"tencent: null parameters", Tencent, Template{Parameters: " null "}, Template{}, nil},
		{"tencent: zone and type fill the parameters", Tencent,
			Template{Zone: "ap-shanghai-2", InstanceType: "S5.LARGE8", Parameters: `{"ImageId":"img-1","SystemDisk":{"DiskSize":9007199254740993}}`},
			Template{Zone: "ap-shanghai-2", InstanceType: "S5.LARGE8", Parameters: `{"ImageId":"img-1","InstanceType":"S5.LARGE8","Placement":{"Zone":"ap-shanghai-2"},"SystemDisk":{"DiskSize":9007199254740993}}`}, nil},
		{"tencent: no parameters, zone only", Tencent, Template{Zone: "z"}, Template{Zone: "z", Parameters: `{"Placement":{"Zone":"z"}}`}, nil},
		{"tencent: type only", Tencent, Template{InstanceType: "S5"}, Template{InstanceType: "S5", Parameters: `{"InstanceType":"S5"}`}, nil},
		{"tencent: parameters fill the template", Tencent,
			Template{Parameters: `{"Placement":{"Zone":"z","ProjectId":0},"InstanceType":"S5"}`},
			Template{Zone: "z", InstanceType: "S5", Parameters: `{"InstanceType":"S5","Placement":{"ProjectId":0,"Zone":"z"}}`}, nil},
		{"tencent: both agree", Tencent, Template{Zone: "z", Parameters: `{"Placement":{"Zone":"z"}}`}, Template{Zone: "z", Parameters: `{"Placement":{"Zone":"z"}}`}, nil},
		{"tencent: parameters without zone or type stay", Tencent, Template{Parameters: `{"ImageId":"i"}`}, Template{Parameters: `{"ImageId":"i"}`}, nil},
		{"tencent: zone differs", Tencent, Template{Zone: "a", Parameters: `{"Placement":{"Zone":"b"}}`}, Template{},
			[]FieldError{{"zone", `"a" differs from parameters.Placement.Zone "b"`}}},
		{"tencent: type differs", Tencent, Template{InstanceType: "a", Parameters: `{"InstanceType":"b"}`}, Template{},
			[]FieldError{{"instanceType", `"a" differs from parameters.InstanceType "b"`}}},
		{"tencent: placement not an object", Tencent, Template{Parameters: `{"Placement":"z"}`}, Template{},
			[]FieldError{{"parameters.Placement", "must be an object"}}},
		{"tencent: not an object", Tencent, Template{Parameters: `[1]`}, Template{}, []FieldError{{"parameters", "must be a JSON object"}}},
		{"tencent: a string", Tencent, Template{Parameters: `"{}"`}, Template{}, []FieldError{{"parameters", "must be a JSON object"}}},
		{"tencent: two values", Tencent, Template{Parameters: `{} {}`}, Template{}, []FieldError{{"parameters", "must be a JSON object"}}},
		{"alibaba: zone and type fill the parameters", Alibaba,
			Template{Zone: "cn-hangzhou-h", InstanceType: "ecs.g7.large", Parameters: `{"ImageId":"m-1"}`},
			Template{Zone: "cn-hangzhou-h", InstanceType: "ecs.g7.large", Parameters: `{"ImageId":"m-1","InstanceType":"ecs.g7.large","ZoneId":"cn-hangzhou-h"}`}, nil},
		{"alibaba: parameters fill the template", Alibaba, Template{Parameters: `{"ZoneId":"cn-hangzhou-h","InstanceType":"ecs.g7.large"}`},
			Template{Zone: "cn-hangzhou-h", InstanceType: "ecs.g7.large", Parameters: `{"InstanceType":"ecs.g7.large","ZoneId":"cn-hangzhou-h"}`}, nil},
		{"alibaba: zone differs", Alibaba, Template{Zone: "cn-hangzhou-h", Parameters: `{"ZoneId":"cn-hangzhou-i"}`}, Template{},
			[]FieldError{{"zone", `"cn-hangzhou-h" differs from parameters.ZoneId "cn-hangzhou-i"`}}},
		{"alibaba: Placement is just a field", Alibaba, Template{Zone: "z", Parameters: `{"Placement":"x"}`}, Template{Zone: "z", Parameters: `{"Placement":"x","ZoneId":"z"}`}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in
			errs := mustLookup(t, tc.provider).Reconcile(&got)
			if !reflect.DeepEqual(errs, tc.errs) {
				t.Fatalf("errors %v, want %v", errs, tc.errs)
			}
			if errs == nil && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestValidateParametersTencent(t *testing.T) {
	p := mustLookup(t, Tencent)
	for _, tc := range []struct {
		name, params string
		errs         []FieldError
	}{
		{"none", "", nil},
		{"empty object", "{}", nil},
		{"a full request", `{"InstanceChargeType":"POSTPAID_BY_HOUR","Placement":{"Zone":"ap-guangzhou-3","ProjectId":0},
			"InstanceType":"S5.MEDIUM4","ImageId":"img-1","SystemDisk":{"DiskType":"CLOUD_PREMIUM","DiskSize":50},
			"DataDisks":[{"DiskSize":100,"DiskType":"CLOUD_SSD","DeleteWithInstance":true}],
			"VirtualPrivateCloud":{"VpcId":"vpc-1","SubnetId":"subnet-1"},"InternetAccessible":{"InternetMaxBandwidthOut":0,"PublicIpAssigned":false},
			"LoginSettings":{"Password":"p"},"SecurityGroupIds":["sg-1"],"TagSpecification":[{"ResourceType":"instance","Tags":[{"Key":"k","Value":"v"}]}],
			"InstanceMarketOptions":{"MarketType":"spot","SpotOptions":{"MaxPrice":"1"}},"UserData":"IyEvYmluL3No","DryRun":false,
			"InstanceCount":1,"ClientToken":"t","SystemDisk ":null}`, []FieldError{{"parameters.SystemDisk ", "is not a field of the Tencent Cloud RunInstances request"}}},
		{"names match ignoring case, like the adapter's decoding", `{"imageid":"img-1","placement":{"zone":"z"}}`, nil},
		{"null leaves a field unset", `{"Placement":null,"ImageId":null,"DataDisks":[null]}`, nil},
		{"unknown field", `{"ImageName":"img-1"}`, []FieldError{{"parameters.ImageName", "is not a field of the Tencent Cloud RunInstances request"}}},
		{"unknown nested field", `{"Placement":{"Zone":"z","Region":"r"}}`, []FieldError{{"parameters.Placement.Region", "is not a field of the Tencent Cloud RunInstances request"}}},
		{"wrong type", `{"InstanceCount":"two"}`, []FieldError{{"parameters.InstanceCount", "must be an integer (int64)"}}},
		{"fraction for an integer", `{"InstanceCount":1.5}`, []FieldError{{"parameters.InstanceCount", "must be an integer (int64)"}}},
		{"bool", `{"DryRun":"yes"}`, []FieldError{{"parameters.DryRun", "must be true or false"}}},
		{"string", `{"ImageId":5}`, []FieldError{{"parameters.ImageId", "must be a string"}}},
		{"array", `{"SecurityGroupIds":"sg-1"}`, []FieldError{{"parameters.SecurityGroupIds", "must be an array"}}},
		{"array item", `{"SecurityGroupIds":["sg-1",2]}`, []FieldError{{"parameters.SecurityGroupIds[1]", "must be a string"}}},
		{"object", `{"Placement":"z"}`, []FieldError{{"parameters.Placement", "must be an object"}}},
		{"nested array item", `{"DataDisks":[{"DiskSize":10},{"DiskSize":"big"}]}`, []FieldError{{"parameters.DataDisks[1].DiskSize", "must be an integer (int64)"}}},
		{"all errors, sorted", `{"Zz":1,"ImageId":1,"Aa":2}`, []FieldError{
			{"parameters.Aa", "is not a field of the Tencent Cloud RunInstances request"},
			{"parameters.ImageId", "must be a string"},
			{"parameters.Zz", "is not a field of the Tencent Cloud RunInstances request"}}},
		{"not an object", `[]`, []FieldError{{"parameters", "must be a JSON object"}}},
		{"malformed", `{"a":`, []FieldError{{"parameters", "must be a JSON object"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if errs := p.ValidateParameters(tc.params); !reflect.DeepEqual(errs, tc.errs) {
				t.Fatalf("errors %v, want %v", errs, tc.errs)
			}
		})
	}
}

func TestValidateParametersAlibaba(t *testing.T) {
	p := mustLookup(t, Alibaba)
	const minimal = `"ZoneId":"cn-hangzhou-h","InstanceType":"ecs.g7.large","ImageId":"aliyun_3_x64_20G_alibase_20240528.vhd","VSwitchId":"vsw-1"`
	for _, tc := range []struct {
		name, params string
		errs         []FieldError
	}{
		{"minimal with one security group", `{` + minimal + `,"SecurityGroupId":"sg-1"}`, nil},
		{"minimal with security groups", `{` + minimal + `,"SecurityGroupIds":["sg-1","sg-2"]}`, nil},
		{"a full request", `{` + minimal + `,"SecurityGroupId":"sg-1","InstanceName":"node","HostName":"node",
			"SystemDisk":{"Category":"cloud_essd","Size":"40","PerformanceLevel":"PL0"},"DataDisk":[{"Size":100,"Category":"cloud_essd","DeleteWithInstance":true}],
			"InternetMaxBandwidthOut":0,"InstanceChargeType":"PostPaid","SpotStrategy":"SpotAsPriceGo","SpotPriceLimit":0.5,
			"KeyPairName":"kp","RamRoleName":"role","UserData":"IyEvYmluL3No","ResourceGroupId":"rg-1","DeletionProtection":false,
			"NetworkInterface":[{"VSwitchId":"vsw-2","SecurityGroupIds":["sg-3"]}],"CpuOptions":{"Core":2,"ThreadsPerCore":2}}`, nil},
		{"nothing: the required fields", ``, []FieldError{
			{"parameters.ImageId", "is required"},
			{"parameters.InstanceType", "is required"},
			{"parameters.SecurityGroupId", "is required (or SecurityGroupIds)"},
			{"parameters.VSwitchId", "is required"},
			{"parameters.ZoneId", "is required"}}},
		{"empty values are missing", `{` + minimal + `,"SecurityGroupId":"","SecurityGroupIds":[],"ImageId":""}`, []FieldError{
			{"parameters.ImageId", "is required"},
			{"parameters.SecurityGroupId", "is required (or SecurityGroupIds)"}}},
		{"nodesmith's fields", `{` + minimal + `,"SecurityGroupId":"sg-1","RegionId":"cn-hangzhou","Amount":2,"MinAmount":1,"ClientToken":"t","Tag":[{"Key":"k","Value":"v"}]}`, []FieldError{
			{"parameters.Amount", "must not be set: nodesmith sets it (the size of a batch)"},
			{"parameters.ClientToken", "must not be set: nodesmith sets it to make retries idempotent"},
			{"parameters.MinAmount", "must not be set: nodesmith creates a batch whole or not at all"},
			{"parameters.RegionId", "must not be set: the region is the template's region"},
			{"parameters.Tag", "must not be set: nodesmith tags its instances itself"}}},
		{"nodesmith's fields in another case", `{` + minimal + `,"SecurityGroupId":"sg-1","amount":2}`, []FieldError{
			{"parameters.amount", "must not be set: nodesmith sets it (the size of a batch)"}}},
		{"Tencent fields are not ECS fields", `{` + minimal + `,"SecurityGroupId":"sg-1","Placement":{"Zone":"z"},"InstanceCount":1}`, []FieldError{
			{"parameters.InstanceCount", "is not a field of the Alibaba Cloud ECS RunInstances request"},
			{"parameters.Placement", "is not a field of the Alibaba Cloud ECS RunInstances request"}}},
		{"types", `{` + minimal + `,"SecurityGroupIds":"sg-1","InternetMaxBandwidthOut":"5","SystemDisk":{"Size":40},"DataDisk":[{"Size":"100"}],"SpotPriceLimit":"cheap"}`, []FieldError{
			{"parameters.DataDisk[0].Size", "must be an integer (int32)"},
			{"parameters.InternetMaxBandwidthOut", "must be an integer (int32)"},
			{"parameters.SecurityGroupIds", "must be an array"},
			{"parameters.SpotPriceLimit", "must be a number"},
			{"parameters.SystemDisk.Size", "must be a string"}}},
		{"int32 range", `{` + minimal + `,"SecurityGroupId":"sg-1","InternetMaxBandwidthOut":4294967296}`, []FieldError{
			{"parameters.InternetMaxBandwidthOut", "must be an integer (int32)"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if errs := p.ValidateParameters(tc.params); !reflect.DeepEqual(errs, tc.errs) {
				t.Fatalf("errors %v, want %v", errs, tc.errs)
			}
		})
	}
}

func TestValidateParametersWithSecretParameters(t *testing.T) {
	ali := mustLookup(t, Alibaba)
	const minimal = `{"ZoneId":"z","InstanceType":"t","VSwitchId":"v","SecurityGroupId":"sg"}`
	for _, tc := range []struct {
		name, provider, params string
		secret                 []string
		errs                   []FieldError
	}{
		{"a secret required field counts", Alibaba, minimal, []string{"ImageId", "Password"}, nil},
		{"named as the decoder would match it", Alibaba, minimal, []string{"imageid"}, nil},
		{"without it", Alibaba, minimal, []string{"Password"}, []FieldError{{"parameters.ImageId", "is required"}}},
		{"not a request field", Alibaba, minimal, []string{"ImageId", "LoginPassword"},
			[]FieldError{{"secretParameters.LoginPassword", "is not a field of the Alibaba Cloud ECS RunInstances request"}}},
		{"a field nodesmith sets", Alibaba, minimal, []string{"ImageId", "ClientToken"},
			[]FieldError{{"secretParameters.ClientToken", "must not be set: nodesmith sets it to make retries idempotent"}}},
		{"tencent", Tencent, `{"ImageId":"img"}`, []string{"LoginSettings", "Nope"},
			[]FieldError{{"secretParameters.Nope", "is not a field of the Tencent Cloud RunInstances request"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ali
			if tc.provider == Tencent {
				p = mustLookup(t, Tencent)
			}
			if errs := p.ValidateParameters(tc.params, tc.secret...); !reflect.DeepEqual(errs, tc.errs) {
				t.Fatalf("errors %v, want %v", errs, tc.errs)
			}
		})
	}
}

// A template given by zone and instance type alone becomes valid Alibaba
// parameters once the rest is there: Reconcile then ValidateParameters is
// what the gateway and the configuration loader do.
func TestReconcileThenValidateAlibaba(t *testing.T) {
	p := mustLookup(t, Alibaba)
	tpl := Template{Zone: "cn-hangzhou-h", InstanceType: "ecs.g7.large", Parameters: `{"ImageId":"m-1","VSwitchId":"vsw-1","SecurityGroupIds":["sg-1"]}`}
	if errs := p.Reconcile(&tpl); errs != nil {
		t.Fatal(errs)
	}
	if errs := p.ValidateParameters(tpl.Parameters); errs != nil {
		t.Fatalf("%s: %v", tpl.Parameters, errs)
	}
}

type shapeA struct {
	Name  *string   `json:"Name,omitempty"`
	Items []*shapeB `json:"Items"`
	Self  *shapeA   `json:"Self"`
}

type shapeB struct {
	N *int64 `json:"N"`
}

type embedded struct{ Hidden string }

type shapeC struct {
	*embedded
	Name  string   `json:"Name"`
	Items []shapeB `json:"Items"`
	Self  *shapeC  `json:"Self"`
	skip  int
	Skip  int `json:"-"`
}

type shapeD struct {
	Name  *string
	Items []*struct {
		N *int32 `json:"N"`
	} `json:"Items"`
}

func TestSameJSONShape(t *testing.T) {
	_ = shapeC{}.skip
	if err := SameJSONShape(reflect.TypeFor[shapeA](), reflect.TypeFor[shapeA]()); err != nil {
		t.Fatal(err)
	}
	err := SameJSONShape(reflect.TypeFor[shapeA](), reflect.TypeFor[shapeC]())
	if err == nil || !strings.Contains(err.Error(), "Hidden: unexpected field") {
		t.Fatalf("promoted field not seen: %v", err)
	}
	err = SameJSONShape(reflect.TypeFor[shapeA](), reflect.TypeFor[shapeD]())
	if err == nil || err.Error() != "Items[].N: int32, want int64" {
		t.Fatalf("kind change not seen: %v", err)
	}
	err = SameJSONShape(reflect.TypeFor[shapeD](), reflect.TypeFor[shapeB]())
	if err == nil || !strings.Contains(err.Error(), "Name: missing") {
		t.Fatalf("missing field not seen: %v", err)
	}
	// The generated schemas are structs all the way down.
	for _, typ := range []reflect.Type{reflect.TypeFor[tencentcvm.RunInstancesRequest](), reflect.TypeFor[alibabaecs.RunInstancesRequest]()} {
		if err := SameJSONShape(typ, typ); err != nil {
			t.Fatal(err)
		}
	}
}
