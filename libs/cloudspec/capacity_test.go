package cloudspec

import (
	"reflect"
	"testing"
)

func TestReconcileCapacity(t *testing.T) {
	const spotParams = `{"InstanceChargeType":"SPOTPAID","InstanceMarketOptions":{"MarketType":"spot","SpotOptions":{"MaxPrice":"0.5","SpotInstanceType":"one-time"}}}`
	for _, tc := range []struct {
		name, provider string
		in             Template
		want           Template
		errs           []FieldError
	}{
		{"tencent: spot becomes SPOTPAID and market options", Tencent,
			Template{CapacityType: "spot", MaxPrice: "0.5"},
			Template{CapacityType: "spot", MaxPrice: "0.5", Parameters: spotParams}, nil},
		{"tencent: spot parameters fill the template", Tencent,
			Template{Parameters: spotParams},
			Template{CapacityType: "spot", MaxPrice: "0.5", Parameters: spotParams}, nil},
		{"tencent: spot with the price in the parameters", Tencent,
			Template{CapacityType: "spot", Parameters: `{"InstanceMarketOptions":{"SpotOptions":{"MaxPrice":"0.5"}}}`},
			Template{CapacityType: "spot", MaxPrice: "0.5", Parameters: spotParams}, nil},
		{"tencent: spot needs a price", Tencent, Template{CapacityType: "spot"}, Template{},
			[]FieldError{{"maxPrice", "is required for spot on Tencent Cloud (RunInstances needs InstanceMarketOptions.SpotOptions.MaxPrice)"}}},
		{"tencent: prices differ", Tencent, Template{CapacityType: "spot", MaxPrice: "0.4", Parameters: spotParams}, Template{},
			[]FieldError{{"maxPrice", `"0.4" differs from parameters.InstanceMarketOptions.SpotOptions.MaxPrice "0.5"`}}},
		{"tencent: spot against a charge type", Tencent, Template{CapacityType: "spot", MaxPrice: "1", Parameters: `{"InstanceChargeType":"PREPAID"}`}, Template{},
			[]FieldError{{"capacityType", `spot differs from parameters.InstanceChargeType "PREPAID" (spot is SPOTPAID)`}}},
		{"tencent: wrong market type", Tencent, Template{CapacityType: "spot", MaxPrice: "1", Parameters: `{"InstanceMarketOptions":{"MarketType":"x"}}`}, Template{},
			[]FieldError{{"parameters.InstanceMarketOptions.MarketType", `"x" is not "spot"`}}},
		{"tencent: on-demand", Tencent, Template{CapacityType: "on-demand"},
			Template{CapacityType: "on-demand", Parameters: `{"InstanceChargeType":"POSTPAID_BY_HOUR"}`}, nil},
		{"tencent: on-demand against SPOTPAID", Tencent, Template{CapacityType: "on-demand", Parameters: spotParams}, Template{},
			[]FieldError{{"capacityType", `on-demand differs from parameters.InstanceChargeType "SPOTPAID"`}}},
		{"tencent: on-demand with market options", Tencent, Template{CapacityType: "on-demand", Parameters: `{"InstanceMarketOptions":{}}`}, Template{},
			[]FieldError{{"parameters.InstanceMarketOptions", "is only for capacityType spot"}}},
		{"unknown capacity type", Tencent, Template{CapacityType: "Spot"}, Template{},
			[]FieldError{{"capacityType", `"Spot" is not one of on-demand, spot`}}},
		{"bad price", Tencent, Template{CapacityType: "spot", MaxPrice: "1e3"}, Template{},
			[]FieldError{{"maxPrice", `"1e3" is not a positive price (a decimal number such as "0.25")`}}},
		{"price on demand", Alibaba, Template{CapacityType: "on-demand", MaxPrice: "1"}, Template{},
			[]FieldError{{"maxPrice", "is only for capacityType spot"}}},
		{"alibaba: spot with a limit", Alibaba, Template{CapacityType: "spot", MaxPrice: "0.25"},
			Template{CapacityType: "spot", MaxPrice: "0.25", Parameters: `{"SpotPriceLimit":0.25,"SpotStrategy":"SpotWithPriceLimit"}`}, nil},
		{"alibaba: spot without a limit", Alibaba, Template{CapacityType: "spot"},
			Template{CapacityType: "spot", Parameters: `{"SpotStrategy":"SpotAsPriceGo"}`}, nil},
		{"alibaba: parameters fill the template", Alibaba, Template{Parameters: `{"SpotStrategy":"SpotWithPriceLimit","SpotPriceLimit":0.3}`},
			Template{CapacityType: "spot", MaxPrice: "0.3", Parameters: `{"SpotPriceLimit":0.3,"SpotStrategy":"SpotWithPriceLimit"}`}, nil},
		{"alibaba: spot is pay as you go", Alibaba, Template{CapacityType: "spot", Parameters: `{"InstanceChargeType":"PrePaid"}`}, Template{},
			[]FieldError{{"capacityType", "spot needs parameters.InstanceChargeType PostPaid, not PrePaid"}}},
		{"alibaba: on-demand against a strategy", Alibaba, Template{CapacityType: "on-demand", Parameters: `{"SpotStrategy":"SpotAsPriceGo"}`}, Template{},
			[]FieldError{{"capacityType", `on-demand differs from parameters.SpotStrategy "SpotAsPriceGo"`}}},
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
			if errs == nil {
				if verrs := mustLookup(t, tc.provider).ValidateParameters(got.Parameters); tc.provider == Tencent && verrs != nil {
					t.Fatalf("the reconciled parameters do not validate: %v", verrs)
				}
			}
		})
	}
}

func TestValidateSpotParameters(t *testing.T) {
	for _, tc := range []struct {
		name, provider, params string
		errs                   []FieldError
	}{
		{"tencent: SPOTPAID without options", Tencent, `{"InstanceChargeType":"SPOTPAID"}`,
			[]FieldError{{"parameters.InstanceMarketOptions", "is required with InstanceChargeType SPOTPAID"}}},
		{"tencent: options without SPOTPAID", Tencent, `{"InstanceMarketOptions":{"MarketType":"spot"}}`,
			[]FieldError{{"parameters.InstanceMarketOptions", "is only valid with InstanceChargeType SPOTPAID"}}},
		{"tencent: everything wrong", Tencent, `{"InstanceChargeType":"SPOTPAID","InstanceMarketOptions":{"MarketType":"Spot","SpotOptions":{"MaxPrice":"-1","SpotInstanceType":"persistent"}}}`,
			[]FieldError{
				{"parameters.InstanceMarketOptions.MarketType", `must be "spot"`},
				{"parameters.InstanceMarketOptions.SpotOptions.MaxPrice", `must be a positive price such as "0.25"`},
				{"parameters.InstanceMarketOptions.SpotOptions.SpotInstanceType", `must be "one-time"`},
			}},
		{"tencent: no spot options", Tencent, `{"InstanceChargeType":"SPOTPAID","InstanceMarketOptions":{"MarketType":"spot"}}`,
			[]FieldError{{"parameters.InstanceMarketOptions.SpotOptions", "is required (with MaxPrice)"}}},
		{"tencent: keys in other case", Tencent, `{"instanceChargeType":"SPOTPAID","instanceMarketOptions":{"marketType":"spot","spotOptions":{"maxPrice":"0.1"}}}`, nil},
		{"alibaba: limit without a price", Alibaba, `{"ZoneId":"z","InstanceType":"t","ImageId":"i","VSwitchId":"v","SecurityGroupId":"s","SpotStrategy":"SpotWithPriceLimit"}`,
			[]FieldError{{"parameters.SpotPriceLimit", "must be a positive price with SpotStrategy SpotWithPriceLimit"}}},
		{"alibaba: unknown strategy", Alibaba, `{"ZoneId":"z","InstanceType":"t","ImageId":"i","VSwitchId":"v","SecurityGroupId":"s","SpotStrategy":"Cheap"}`,
			[]FieldError{{"parameters.SpotStrategy", `"Cheap" is not one of NoSpot, SpotWithPriceLimit, SpotAsPriceGo`}}},
		{"alibaba: spot prepaid", Alibaba, `{"ZoneId":"z","InstanceType":"t","ImageId":"i","VSwitchId":"v","SecurityGroupId":"s","SpotStrategy":"SpotAsPriceGo","InstanceChargeType":"PrePaid"}`,
			[]FieldError{{"parameters.InstanceChargeType", "must be PostPaid for a spot instance"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := mustLookup(t, tc.provider).ValidateParameters(tc.params)
			if !reflect.DeepEqual(errs, tc.errs) {
				t.Fatalf("errors %v, want %v", errs, tc.errs)
			}
		})
	}
}
