package cloudspec

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Offering is one place a template's VMs may be created (the mirror of
// cloudv1.Offering): a zone, the subnet there ("" for the parameters'),
// an instance type, and a capacity type ("" for the template's).
type Offering struct {
	Zone         string `json:"zone"`
	SubnetID     string `json:"subnetId,omitempty"`
	InstanceType string `json:"instanceType"`
	CapacityType string `json:"capacityType,omitempty"`
}

// MaxOfferings bounds a template's offerings.
const MaxOfferings = 20

// Offering strategies: how a new batch orders a template's offerings.
const (
	// StrategyPriority tries the offerings as written (the default).
	StrategyPriority = "priority"
	// StrategyBalanced tries first the zone with the fewest live
	// instances of the group, ties in written order.
	StrategyBalanced = "balanced"
)

// OfferingStrategies lists the strategies a template may name.
var OfferingStrategies = []string{StrategyPriority, StrategyBalanced}

// ApplyOffering returns params (a template's parameters, as Reconcile
// leaves them) with the offering's zone, subnet and instance type written
// in and, when the offering names a capacity type other than the
// parameters', the cloud's capacity fields rewritten for it (maxPrice, the template's, is used for spot).
// Errors are at the parameter that cannot hold the value, or at
// "capacityType"/"maxPrice".
func (p Provider) ApplyOffering(params, maxPrice string, o Offering) (string, []FieldError) {
	obj, errs := parseObject(params)
	if errs != nil {
		return "", errs
	}
	if obj == nil {
		obj = map[string]any{}
	}
	for _, f := range []struct{ field, value string }{
		{p.ZoneField, o.Zone}, {p.InstanceTypeField, o.InstanceType}, {p.SubnetField, o.SubnetID},
	} {
		if f.value == "" || f.field == "" {
			continue
		}
		if err := set(obj, fieldPath(f.field), f.value); err != nil {
			return "", []FieldError{*err}
		}
	}
	if o.CapacityType != "" && p.capacity != nil && o.CapacityType != p.capacityOf(obj) {
		for _, name := range p.capacityFields {
			if _, k := lookup(obj, name); obj[k] != nil {
				delete(obj, k)
			}
		}
		t := Template{CapacityType: o.CapacityType}
		if o.CapacityType == CapacitySpot {
			t.MaxPrice = maxPrice
		}
		if errs := checkCapacityFields(&t); errs != nil {
			return "", errs
		}
		if errs := p.capacity(obj, &t); errs != nil {
			return "", errs
		}
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return "", []FieldError{{"parameters", fmt.Sprintf("cannot be encoded: %v", err)}}
	}
	return string(out), nil
}

// capacityOf is the capacity type create parameters ask for.
func (p Provider) capacityOf(obj map[string]any) string {
	if p.isSpot != nil && p.isSpot(obj) {
		return CapacitySpot
	}
	return CapacityOnDemand
}

// set writes value at path of obj, creating the objects on the way.
func set(obj map[string]any, path []string, value string) *FieldError {
	parent := obj
	for i, key := range path[:len(path)-1] {
		v, k := lookup(parent, key)
		if v == nil {
			m := map[string]any{}
			parent[k] = m
			parent = m
			continue
		}
		m, ok := v.(map[string]any)
		if !ok {
			return &FieldError{"parameters." + strings.Join(path[:i+1], "."), "must be an object"}
		}
		parent = m
	}
	_, k := lookup(parent, path[len(path)-1])
	parent[k] = value
	return nil
}

// reconcileOfferings checks a template's offerings on their own and makes
// its zone and instance type the first offering's (a template that names
// them must name the same). Reconcile then checks that each offering can
// be written into the reconciled parameters (checkOfferingParameters).
func reconcileOfferings(t *Template) []FieldError {
	if len(t.Offerings) == 0 {
		switch t.OfferingStrategy {
		case "", StrategyPriority:
			return nil
		case StrategyBalanced:
			return []FieldError{{"offeringStrategy", "needs offerings"}}
		}
	}
	var errs []FieldError
	switch t.OfferingStrategy {
	case "", StrategyPriority, StrategyBalanced:
	default:
		errs = append(errs, FieldError{"offeringStrategy", fmt.Sprintf("%q is not one of %s", t.OfferingStrategy, strings.Join(OfferingStrategies, ", "))})
	}
	if len(t.Offerings) > MaxOfferings {
		return append(errs, FieldError{"offerings", fmt.Sprintf("has %d entries, at most %d are allowed", len(t.Offerings), MaxOfferings)})
	}
	seen := map[Offering]int{}
	for i, o := range t.Offerings {
		at := fmt.Sprintf("offerings[%d]", i)
		if o.Zone == "" {
			errs = append(errs, FieldError{at + ".zone", "is required"})
		}
		if o.InstanceType == "" {
			errs = append(errs, FieldError{at + ".instanceType", "is required"})
		}
		switch o.CapacityType {
		case "", CapacityOnDemand, CapacitySpot:
		default:
			errs = append(errs, FieldError{at + ".capacityType", fmt.Sprintf("%q is not one of %s", o.CapacityType, strings.Join(CapacityTypes, ", "))})
		}
		if j, dup := seen[o]; dup {
			errs = append(errs, FieldError{at, fmt.Sprintf("repeats offerings[%d]", j)})
		}
		seen[o] = i
	}
	if errs != nil {
		return errs
	}
	first := t.Offerings[0]
	for _, f := range []struct {
		name  string
		value *string
		want  string
	}{{"zone", &t.Zone, first.Zone}, {"instanceType", &t.InstanceType, first.InstanceType}} {
		switch *f.value {
		case "":
			*f.value = f.want
		case f.want:
		default:
			errs = append(errs, FieldError{f.name, fmt.Sprintf("%q differs from offerings[0].%s %q (with offerings, the template's %s is the first offering's)", *f.value, f.name, f.want, f.name)})
		}
	}
	return errs
}

// checkOfferingParameters checks that every offering can be written into
// the template's reconciled parameters; errors are under "offerings[i]".
func (p Provider) checkOfferingParameters(t *Template) []FieldError {
	var errs []FieldError
	for i, o := range t.Offerings {
		if _, oe := p.ApplyOffering(t.Parameters, t.MaxPrice, o); oe != nil {
			for _, e := range oe {
				errs = append(errs, FieldError{fmt.Sprintf("offerings[%d].%s", i, e.Path), e.Msg})
			}
		}
	}
	return errs
}

// WithCapacity returns o with its capacity type filled in: o's own, else
// the template's (templateCapacity), else on-demand. An offering's
// unavailable mark (messaging.OfferingKey), metrics and views name it so
// resolved, the same in every service.
func (o Offering) WithCapacity(templateCapacity string) Offering {
	switch {
	case o.CapacityType != "":
	case templateCapacity != "":
		o.CapacityType = templateCapacity
	default:
		o.CapacityType = CapacityOnDemand
	}
	return o
}
