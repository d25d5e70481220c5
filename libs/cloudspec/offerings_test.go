package cloudspec

import (
	"reflect"
	"testing"
)

func TestApplyOfferingWritesZoneSubnetTypeAndCapacity(t *testing.T) {
	for _, tc := range []struct {
		name, provider, params, maxPrice string
		o                                Offering
		want                             string
		errs                             []FieldError
	}{
		{
			name: "tencent zone, subnet and type", provider: Tencent,
			params: `{"ImageId":"img-1","InstanceType":"S5.MEDIUM4","Placement":{"ProjectId":0,"Zone":"ap-guangzhou-3"},"VirtualPrivateCloud":{"SubnetId":"subnet-a","VpcId":"vpc-1"}}`,
			o:      Offering{Zone: "ap-guangzhou-4", SubnetID: "subnet-b", InstanceType: "SA2.MEDIUM4"},
			want:   `{"ImageId":"img-1","InstanceType":"SA2.MEDIUM4","Placement":{"ProjectId":0,"Zone":"ap-guangzhou-4"},"VirtualPrivateCloud":{"SubnetId":"subnet-b","VpcId":"vpc-1"}}`,
		},
		{
			name: "tencent keeps the subnet when the offering names none, matching keys in any case", provider: Tencent,
			params: `{"placement":{"zone":"ap-guangzhou-3"},"virtualPrivateCloud":{"subnetId":"subnet-a"}}`,
			o:      Offering{Zone: "ap-guangzhou-4", InstanceType: "S5.MEDIUM4"},
			want:   `{"InstanceType":"S5.MEDIUM4","placement":{"zone":"ap-guangzhou-4"},"virtualPrivateCloud":{"subnetId":"subnet-a"}}`,
		},
		{
			name: "tencent on-demand template, spot offering", provider: Tencent, maxPrice: "0.5",
			params: `{"InstanceChargeType":"POSTPAID_BY_HOUR","Placement":{"Zone":"ap-guangzhou-3"}}`,
			o:      Offering{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4", CapacityType: CapacitySpot},
			want:   `{"InstanceChargeType":"SPOTPAID","InstanceMarketOptions":{"MarketType":"spot","SpotOptions":{"MaxPrice":"0.5","SpotInstanceType":"one-time"}},"InstanceType":"S5.MEDIUM4","Placement":{"Zone":"ap-guangzhou-3"}}`,
		},
		{
			name: "tencent spot template, on-demand offering", provider: Tencent, maxPrice: "0.5",
			params: `{"InstanceChargeType":"SPOTPAID","InstanceMarketOptions":{"MarketType":"spot","SpotOptions":{"MaxPrice":"0.5"}},"Placement":{"Zone":"ap-guangzhou-3"}}`,
			o:      Offering{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4", CapacityType: CapacityOnDemand},
			want:   `{"InstanceChargeType":"POSTPAID_BY_HOUR","InstanceType":"S5.MEDIUM4","Placement":{"Zone":"ap-guangzhou-3"}}`,
		},
		{
			name: "tencent spot offering without a max price", provider: Tencent,
			params: `{}`,
			o:      Offering{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4", CapacityType: CapacitySpot},
			errs:   []FieldError{{"maxPrice", "is required for spot on Tencent Cloud (RunInstances needs InstanceMarketOptions.SpotOptions.MaxPrice)"}},
		},
		{
			name: "alibaba vswitch and spot as price go", provider: Alibaba,
			params: `{"InstanceType":"ecs.g6.large","VSwitchId":"vsw-a","ZoneId":"cn-hangzhou-h"}`,
			o:      Offering{Zone: "cn-hangzhou-i", SubnetID: "vsw-b", InstanceType: "ecs.g7.large", CapacityType: CapacitySpot},
			want:   `{"InstanceType":"ecs.g7.large","SpotStrategy":"SpotAsPriceGo","VSwitchId":"vsw-b","ZoneId":"cn-hangzhou-i"}`,
		},
		{
			name: "tencent prepaid template, on-demand offering: the charge type stays", provider: Tencent,
			params: `{"InstanceChargeType":"PREPAID","Placement":{"Zone":"ap-guangzhou-3"}}`,
			o:      Offering{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4", CapacityType: CapacityOnDemand},
			want:   `{"InstanceChargeType":"PREPAID","InstanceType":"S5.MEDIUM4","Placement":{"Zone":"ap-guangzhou-3"}}`,
		},
		{
			name: "an object in the way", provider: Tencent,
			params: `{"Placement":"ap-guangzhou-3"}`,
			o:      Offering{Zone: "ap-guangzhou-4", InstanceType: "S5.MEDIUM4"},
			errs:   []FieldError{{"parameters.Placement", "must be an object"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := mustLookup(t, tc.provider).ApplyOffering(tc.params, tc.maxPrice, tc.o)
			if !reflect.DeepEqual(errs, tc.errs) {
				t.Fatalf("errors %v, want %v", errs, tc.errs)
			}
			if got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestReconcileChecksOfferingsAndTakesTheFirstOnesZoneAndType(t *testing.T) {
	p := mustLookup(t, Tencent)
	a := Offering{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4"}
	b := Offering{Zone: "ap-guangzhou-4", SubnetID: "subnet-b", InstanceType: "S5.MEDIUM4"}

	tmpl := Template{Parameters: `{"ImageId":"img-1"}`, Offerings: []Offering{a, b}, OfferingStrategy: StrategyBalanced}
	if errs := p.Reconcile(&tmpl); errs != nil {
		t.Fatal(errs)
	}
	if tmpl.Zone != a.Zone || tmpl.InstanceType != a.InstanceType {
		t.Fatalf("zone/type = %q/%q, want the first offering's", tmpl.Zone, tmpl.InstanceType)
	}
	if want := `{"ImageId":"img-1","InstanceType":"S5.MEDIUM4","Placement":{"Zone":"ap-guangzhou-3"}}`; tmpl.Parameters != want {
		t.Fatalf("parameters %s, want %s", tmpl.Parameters, want)
	}

	for _, tc := range []struct {
		name string
		t    Template
		want []FieldError
	}{
		{"zone differs from the first offering", Template{Zone: "ap-guangzhou-4", Offerings: []Offering{a}},
			[]FieldError{{"zone", `"ap-guangzhou-4" differs from offerings[0].zone "ap-guangzhou-3" (with offerings, the template's zone is the first offering's)`}}},
		{"missing fields and a repeat", Template{Offerings: []Offering{a, {SubnetID: "s"}, a}},
			[]FieldError{{"offerings[1].zone", "is required"}, {"offerings[1].instanceType", "is required"}, {"offerings[2]", "repeats offerings[0]"}}},
		{"bad capacity type and strategy", Template{Offerings: []Offering{{Zone: "z", InstanceType: "t", CapacityType: "cheap"}}, OfferingStrategy: "random"},
			[]FieldError{{"offeringStrategy", `"random" is not one of priority, balanced`}, {"offerings[0].capacityType", `"cheap" is not one of on-demand, spot`}}},
		{"balanced without offerings", Template{OfferingStrategy: StrategyBalanced},
			[]FieldError{{"offeringStrategy", "needs offerings"}}},
		{"a spot offering on Tencent needs a max price", Template{Offerings: []Offering{a, {Zone: "ap-guangzhou-4", InstanceType: "S5.MEDIUM4", CapacityType: CapacitySpot}}},
			[]FieldError{{"offerings[1].maxPrice", "is required for spot on Tencent Cloud (RunInstances needs InstanceMarketOptions.SpotOptions.MaxPrice)"}}},
		{"too many", Template{Offerings: make([]Offering, MaxOfferings+1)},
			[]FieldError{{"offerings", "has 21 entries, at most 20 are allowed"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.t
			if errs := p.Reconcile(&got); !reflect.DeepEqual(errs, tc.want) {
				t.Fatalf("errors %v\nwant   %v", errs, tc.want)
			}
		})
	}
}

func TestWithCapacityResolvesOfferingThenTemplateThenOnDemand(t *testing.T) {
	o := Offering{Zone: "z", InstanceType: "t"}
	if got := o.WithCapacity("").CapacityType; got != CapacityOnDemand {
		t.Fatalf("no capacity anywhere = %q, want on-demand", got)
	}
	if got := o.WithCapacity(CapacitySpot).CapacityType; got != CapacitySpot {
		t.Fatalf("template spot = %q, want spot", got)
	}
	o.CapacityType = CapacityOnDemand
	if got := o.WithCapacity(CapacitySpot).CapacityType; got != CapacityOnDemand {
		t.Fatalf("offering on-demand in a spot template = %q, want on-demand", got)
	}
}
