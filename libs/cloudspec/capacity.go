package cloudspec

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Capacity types of a template: what kind of VM it buys.
const (
	// CapacityOnDemand is a normal, pay-as-you-go VM (the default).
	CapacityOnDemand = "on-demand"
	// CapacitySpot is a spot VM: cheaper, reclaimable by the cloud with a
	// short notice.
	CapacitySpot = "spot"
)

// CapacityTypes lists the capacity types a template may name.
var CapacityTypes = []string{CapacityOnDemand, CapacitySpot}

// Tencent's and Alibaba's names for the same.
const (
	tencentSpotPaid   = "SPOTPAID"
	tencentOnDemand   = "POSTPAID_BY_HOUR"
	tencentMarketSpot = "spot"
	tencentOneTime    = "one-time"

	alibabaNoSpot         = "NoSpot"
	alibabaSpotWithLimit  = "SpotWithPriceLimit"
	alibabaSpotAsPriceGo  = "SpotAsPriceGo"
	alibabaPrePaid        = "PrePaid"
	alibabaPostPaid       = "PostPaid"
	alibabaChargeTypeName = "InstanceChargeType"
)

// checkCapacityFields checks a template's capacityType and maxPrice on
// their own.
func checkCapacityFields(t *Template) []FieldError {
	var errs []FieldError
	switch t.CapacityType {
	case "", CapacityOnDemand, CapacitySpot:
	default:
		errs = append(errs, FieldError{"capacityType", fmt.Sprintf("%q is not one of %s", t.CapacityType, strings.Join(CapacityTypes, ", "))})
	}
	if t.MaxPrice != "" {
		if !validPrice(t.MaxPrice) {
			errs = append(errs, FieldError{"maxPrice", fmt.Sprintf("%q is not a positive price (a decimal number such as \"0.25\")", t.MaxPrice)})
		}
		if t.CapacityType == CapacityOnDemand {
			errs = append(errs, FieldError{"maxPrice", "is only for capacityType spot"})
		}
	}
	return errs
}

// validPrice reports whether s is a positive decimal number, written
// plainly (no sign, exponent or hex).
func validPrice(s string) bool {
	if strings.ContainsAny(s, "eE+-xXpP_") || strings.EqualFold(s, "inf") || strings.EqualFold(s, "nan") {
		return false
	}
	f, err := strconv.ParseFloat(s, 64)
	return err == nil && f > 0
}

// lookup returns obj's value for key, matching the key exactly, else
// ignoring case (as the adapters' JSON decoding does), and the key it is
// under.
func lookup(obj map[string]any, key string) (any, string) {
	if v, ok := obj[key]; ok {
		return v, key
	}
	for k, v := range obj {
		if strings.EqualFold(k, key) {
			return v, k
		}
	}
	return nil, key
}

func lookupString(obj map[string]any, key string) (string, string) {
	v, k := lookup(obj, key)
	s, _ := v.(string)
	return s, k
}

// lookupObject returns obj's object at key, creating it (under key) if
// create and it is absent; ok is false if the value is not an object.
func lookupObject(obj map[string]any, key string, create bool) (map[string]any, string, bool) {
	v, k := lookup(obj, key)
	if v == nil {
		if !create {
			return nil, k, true
		}
		m := map[string]any{}
		obj[k] = m
		return m, k, true
	}
	m, ok := v.(map[string]any)
	return m, k, ok
}

// tencentCapacity makes a Tencent template's capacityType and maxPrice
// agree with its RunInstances parameters: spot is InstanceChargeType
// SPOTPAID with InstanceMarketOptions {MarketType spot, SpotOptions
// {MaxPrice, SpotInstanceType one-time}}; the RunInstances API needs a
// MaxPrice, so a spot template must give one (maxPrice or the
// parameters'). Parameters saying SPOTPAID make an unset capacityType spot.
func tencentCapacity(obj map[string]any, t *Template) []FieldError {
	charge, chargeKey := lookupString(obj, "InstanceChargeType")
	market, marketKey, ok := lookupObject(obj, "InstanceMarketOptions", false)
	if !ok {
		return []FieldError{{"parameters." + marketKey, "must be an object"}}
	}
	if t.CapacityType == "" && charge == tencentSpotPaid {
		t.CapacityType = CapacitySpot
	}
	switch t.CapacityType {
	case CapacitySpot:
		if charge != "" && charge != tencentSpotPaid {
			return []FieldError{{"capacityType", fmt.Sprintf("spot differs from parameters.%s %q (spot is %s)", chargeKey, charge, tencentSpotPaid)}}
		}
		obj[chargeKey] = tencentSpotPaid
		market, marketKey, _ = lookupObject(obj, "InstanceMarketOptions", true)
		mt, mtKey := lookupString(market, "MarketType")
		switch mt {
		case "":
			market[mtKey] = tencentMarketSpot
		case tencentMarketSpot:
		default:
			return []FieldError{{"parameters." + marketKey + "." + mtKey, fmt.Sprintf("%q is not %q", mt, tencentMarketSpot)}}
		}
		spot, spotKey, ok := lookupObject(market, "SpotOptions", true)
		if !ok {
			return []FieldError{{"parameters." + marketKey + "." + spotKey, "must be an object"}}
		}
		price, priceKey := lookupString(spot, "MaxPrice")
		switch {
		case price == "" && t.MaxPrice == "":
			return []FieldError{{"maxPrice", "is required for spot on Tencent Cloud (RunInstances needs InstanceMarketOptions.SpotOptions.MaxPrice)"}}
		case price == "":
			spot[priceKey] = t.MaxPrice
		case t.MaxPrice == "":
			t.MaxPrice = price
		case price != t.MaxPrice:
			return []FieldError{{"maxPrice", fmt.Sprintf("%q differs from parameters.%s.%s.%s %q", t.MaxPrice, marketKey, spotKey, priceKey, price)}}
		}
		if st, stKey := lookupString(spot, "SpotInstanceType"); st == "" {
			spot[stKey] = tencentOneTime
		}
	case CapacityOnDemand:
		if charge == tencentSpotPaid {
			return []FieldError{{"capacityType", fmt.Sprintf("on-demand differs from parameters.%s %q", chargeKey, charge)}}
		}
		if market != nil {
			return []FieldError{{"parameters." + marketKey, "is only for capacityType spot"}}
		}
		if charge == "" {
			obj[chargeKey] = tencentOnDemand
		}
	}
	return nil
}

// tencentCheckSpot checks the spot parameters of a Tencent RunInstances
// request as the API does: SPOTPAID needs InstanceMarketOptions with
// MarketType "spot" and a positive SpotOptions.MaxPrice; SpotInstanceType
// may only be "one-time"; InstanceMarketOptions is only for SPOTPAID.
// Type errors are the validator's; this only looks at well-typed values.
func tencentCheckSpot(obj map[string]any) []FieldError {
	charge, chargeKey := lookupString(obj, "InstanceChargeType")
	market, marketKey, ok := lookupObject(obj, "InstanceMarketOptions", false)
	if !ok {
		return nil
	}
	mp := "parameters." + marketKey
	if charge != tencentSpotPaid {
		if market != nil {
			return []FieldError{{mp, fmt.Sprintf("is only valid with %s %s", chargeKey, tencentSpotPaid)}}
		}
		return nil
	}
	if market == nil {
		return []FieldError{{mp, fmt.Sprintf("is required with %s %s", chargeKey, tencentSpotPaid)}}
	}
	var errs []FieldError
	if mt, mtKey := lookupString(market, "MarketType"); mt != tencentMarketSpot {
		errs = append(errs, FieldError{mp + "." + mtKey, fmt.Sprintf("must be %q", tencentMarketSpot)})
	}
	spot, spotKey, ok := lookupObject(market, "SpotOptions", false)
	switch {
	case !ok:
	case spot == nil:
		errs = append(errs, FieldError{mp + "." + spotKey, "is required (with MaxPrice)"})
	default:
		if price, priceKey := lookupString(spot, "MaxPrice"); !validPrice(price) {
			errs = append(errs, FieldError{mp + "." + spotKey + "." + priceKey, "must be a positive price such as \"0.25\""})
		}
		if v, stKey := lookup(spot, "SpotInstanceType"); v != nil {
			if st, _ := v.(string); st != tencentOneTime {
				errs = append(errs, FieldError{mp + "." + spotKey + "." + stKey, fmt.Sprintf("must be %q", tencentOneTime)})
			}
		}
	}
	return errs
}

// alibabaCapacity makes an ECS template's capacityType and maxPrice agree
// with its parameters: spot is SpotStrategy SpotWithPriceLimit with
// SpotPriceLimit maxPrice, or SpotAsPriceGo without a maxPrice; on-demand
// is NoSpot.
func alibabaCapacity(obj map[string]any, t *Template) []FieldError {
	strategy, sKey := lookupString(obj, "SpotStrategy")
	limitV, limitKey := lookup(obj, "SpotPriceLimit")
	limit := ""
	if n, ok := limitV.(json.Number); ok {
		limit = n.String()
	}
	if t.CapacityType == "" && (strategy == alibabaSpotWithLimit || strategy == alibabaSpotAsPriceGo) {
		t.CapacityType = CapacitySpot
	}
	switch t.CapacityType {
	case CapacitySpot:
		if charge, cKey := lookupString(obj, alibabaChargeTypeName); charge == alibabaPrePaid {
			return []FieldError{{"capacityType", fmt.Sprintf("spot needs parameters.%s %s, not %s", cKey, alibabaPostPaid, charge)}}
		}
		switch {
		case strategy == alibabaNoSpot:
			return []FieldError{{"capacityType", fmt.Sprintf("spot differs from parameters.%s %q", sKey, strategy)}}
		case t.MaxPrice != "" && limit != "" && limit != t.MaxPrice:
			return []FieldError{{"maxPrice", fmt.Sprintf("%q differs from parameters.%s %s", t.MaxPrice, limitKey, limit)}}
		case t.MaxPrice == "":
			t.MaxPrice = limit
		}
		if t.MaxPrice != "" {
			if strategy == alibabaSpotAsPriceGo {
				return []FieldError{{"maxPrice", fmt.Sprintf("contradicts parameters.%s %s (no price limit)", sKey, strategy)}}
			}
			obj[sKey] = alibabaSpotWithLimit
			obj[limitKey] = json.Number(t.MaxPrice)
		} else {
			if strategy == alibabaSpotWithLimit {
				return []FieldError{{"maxPrice", fmt.Sprintf("is required with parameters.%s %s", sKey, strategy)}}
			}
			obj[sKey] = alibabaSpotAsPriceGo
		}
	case CapacityOnDemand:
		if strategy != "" && strategy != alibabaNoSpot {
			return []FieldError{{"capacityType", fmt.Sprintf("on-demand differs from parameters.%s %q", sKey, strategy)}}
		}
		if limitV != nil {
			return []FieldError{{"parameters." + limitKey, "is only for capacityType spot"}}
		}
	}
	return nil
}

// alibabaCheckSpot checks ECS's spot parameters: SpotWithPriceLimit needs
// SpotPriceLimit, and spot needs pay-as-you-go.
func alibabaCheckSpot(obj map[string]any) []FieldError {
	strategy, sKey := lookupString(obj, "SpotStrategy")
	limitV, limitKey := lookup(obj, "SpotPriceLimit")
	var errs []FieldError
	switch strategy {
	case "", alibabaNoSpot:
		return nil
	case alibabaSpotWithLimit:
		n, ok := limitV.(json.Number)
		if !ok || !validPrice(n.String()) {
			errs = append(errs, FieldError{"parameters." + limitKey, fmt.Sprintf("must be a positive price with %s %s", sKey, strategy)})
		}
	case alibabaSpotAsPriceGo:
	default:
		return []FieldError{{"parameters." + sKey, fmt.Sprintf("%q is not one of %s, %s, %s", strategy, alibabaNoSpot, alibabaSpotWithLimit, alibabaSpotAsPriceGo)}}
	}
	if charge, cKey := lookupString(obj, alibabaChargeTypeName); charge == alibabaPrePaid {
		errs = append(errs, FieldError{"parameters." + cKey, fmt.Sprintf("must be %s for a spot instance", alibabaPostPaid)})
	}
	return errs
}
