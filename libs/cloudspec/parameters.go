package cloudspec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// Template is what an instance template says about its VM besides the
// create parameters, and the parameters themselves.
type Template struct {
	Zone         string
	InstanceType string
	// Parameters is the cloud's create request as a JSON object ("" for
	// none), without the fields nodesmith sets (instance count, client
	// token, region).
	Parameters string
	// CapacityType is CapacitySpot or CapacityOnDemand ("" leaves the
	// parameters' choice, on-demand by default); MaxPrice is a spot VM's
	// highest price per hour, a decimal string ("" for none where the
	// cloud allows it). Reconcile writes them into the parameters in the
	// cloud's terms.
	CapacityType string
	MaxPrice     string
	// Offerings are the template's ordered alternatives of where to
	// create VMs; with offerings, Zone and InstanceType are the first
	// offering's. OfferingStrategy orders them for a batch
	// (StrategyPriority, StrategyBalanced; "" is priority).
	Offerings        []Offering
	OfferingStrategy string
}

// Reconcile makes a template's zone and instance type agree with its
// create parameters' (ZoneField, InstanceTypeField): whichever is given
// fills the other, so the cloud call and the template node Cluster
// Autoscaler sees describe the same VM. A value given on both sides must
// be the same. It leaves t.Parameters compact with keys sorted and numbers
// as written, and "" when there are none and the template names neither
// zone nor instance type.
//
// Errors are at "parameters" (not a JSON object), at an object on the way
// to the field ("parameters.Placement": must be an object) or at "zone" /
// "instanceType" (the two sides differ).
//
// The capacity type and max price become the cloud's spot parameters
// (Tencent: InstanceChargeType SPOTPAID and InstanceMarketOptions; Alibaba:
// SpotStrategy and SpotPriceLimit); parameters that already choose spot
// fill an empty CapacityType and MaxPrice. Errors are at "capacityType",
// "maxPrice" or the parameter that contradicts them.
//
// Offerings are checked (zone and instance type required, no repeats, at
// most MaxOfferings, each writable into the parameters: errors under
// "offerings[i]"), and the first one's zone and instance type become the
// template's (errors at "zone"/"instanceType" when the template names
// others).
func (p Provider) Reconcile(t *Template) []FieldError {
	obj, errs := parseObject(t.Parameters)
	if errs != nil {
		return errs
	}
	if errs := checkCapacityFields(t); errs != nil {
		return errs
	}
	if errs := reconcileOfferings(t); errs != nil {
		return errs
	}
	if obj == nil && t.Zone == "" && t.InstanceType == "" && t.CapacityType == "" && t.MaxPrice == "" {
		t.Parameters = ""
		return nil
	}
	if obj == nil {
		obj = map[string]any{}
	}
	for _, f := range []struct {
		field, name string
		value       *string
	}{{p.ZoneField, "zone", &t.Zone}, {p.InstanceTypeField, "instanceType", &t.InstanceType}} {
		if err := agree(obj, fieldPath(f.field), f.name, f.value); err != nil {
			errs = append(errs, *err)
		}
	}
	if errs != nil {
		return errs
	}
	if p.capacity != nil {
		if errs := p.capacity(obj, t); errs != nil {
			return errs
		}
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return []FieldError{{"parameters", fmt.Sprintf("cannot be encoded: %v", err)}}
	}
	t.Parameters = string(out)
	return p.checkOfferingParameters(t)
}

// agree fills the field at path of obj or *value from the other, or
// reports that they differ.
func agree(obj map[string]any, path []string, name string, value *string) *FieldError {
	parent := obj
	for i, key := range path[:len(path)-1] {
		next, isObj := parent[key].(map[string]any)
		if !isObj && parent[key] != nil {
			return &FieldError{"parameters." + strings.Join(path[:i+1], "."), "must be an object"}
		}
		if next == nil {
			if *value == "" {
				return nil
			}
			next = map[string]any{}
			parent[key] = next
		}
		parent = next
	}
	leaf := path[len(path)-1]
	switch got, _ := parent[leaf].(string); {
	case got == "":
		if *value != "" {
			parent[leaf] = *value
		}
	case *value == "":
		*value = got
	case *value != got:
		return &FieldError{name, fmt.Sprintf("%q differs from parameters.%s %q", *value, strings.Join(path, "."), got)}
	}
	return nil
}

// parseObject decodes a JSON object keeping numbers as written; "" and
// "null" are no object.
func parseObject(params string) (map[string]any, []FieldError) {
	raw := bytes.TrimSpace([]byte(params))
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil || dec.More() {
		return nil, []FieldError{{"parameters", "must be a JSON object"}}
	}
	return obj, nil
}

// ValidateParameters checks create parameters (a JSON object, "" for
// none) against the cloud's create request: every field must be one of
// the request's (names match as the cloud adapter's JSON decoding does:
// exactly, else ignoring case) with a value of its type, the fields the
// cloud needs must be there and the fields nodesmith sets must not. Errors
// are sorted by path ("parameters.DataDisks[0].DiskSize").
//
// secretParameters names the template's secret parameters (top-level
// fields the cloud adapter merges in; their values are sealed, so only
// their names are checked: request fields, not ones nodesmith sets, and
// they count as present). Their errors are at "secretParameters.<name>"
// and never hold a value.
func (p Provider) ValidateParameters(params string, secretParameters ...string) []FieldError {
	obj, errs := parseObject(params)
	if errs != nil {
		return errs
	}
	top := map[string]written{}
	v := validator{req: p.requestName}
	if obj != nil {
		v.object(obj, p.request, "parameters", top)
	}
	fields := jsonFields(p.request)
	for _, k := range secretParameters {
		name, _, ok := lookupField(fields, k)
		if !ok {
			v.add("secretParameters."+k, "is not a field of the %s", v.req)
			continue
		}
		top[name] = written{"secretParameters." + k, secretValue{}}
	}
	for _, alts := range p.required {
		if !anySet(top, alts) {
			msg := "is required"
			if len(alts) > 1 {
				msg = "is required (or " + strings.Join(alts[1:], " or ") + ")"
			}
			v.add("parameters."+alts[0], "%s", msg)
		}
	}
	for name, why := range p.forbidden {
		if w, ok := top[name]; ok && w.val != nil {
			v.add(w.path, "must not be set: %s", why)
		}
	}
	if obj != nil && p.checkSpot != nil && len(v.errs) == 0 {
		v.errs = append(v.errs, p.checkSpot(obj)...)
	}
	sort.SliceStable(v.errs, func(i, j int) bool { return v.errs[i].Path < v.errs[j].Path })
	return v.errs
}

// written is a top-level value and the path it was given at.
type written struct {
	path string
	val  any
}

// secretValue stands for a secret parameter's value: present, unknown.
type secretValue struct{}

func anySet(top map[string]written, names []string) bool {
	for _, n := range names {
		switch val := top[n].val.(type) {
		case nil:
		case string:
			if val != "" {
				return true
			}
		case []any:
			if len(val) > 0 {
				return true
			}
		default:
			return true
		}
	}
	return false
}

type validator struct {
	req  string
	errs []FieldError
}

func (v *validator) add(path, format string, args ...any) {
	v.errs = append(v.errs, FieldError{path, fmt.Sprintf(format, args...)})
}

// object checks obj against struct type t; top, if not nil, receives the
// values under their canonical field names.
func (v *validator) object(obj map[string]any, t reflect.Type, path string, top map[string]written) {
	fields := jsonFields(t)
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		name, ft, ok := lookupField(fields, k)
		p := path + "." + k
		if !ok {
			v.add(p, "is not a field of the %s", v.req)
			continue
		}
		if top != nil {
			top[name] = written{p, obj[k]}
		}
		v.value(obj[k], ft, p)
	}
}

// value checks one JSON value against the Go type encoding/json would
// decode it into. JSON null is accepted everywhere (it leaves the field
// unset).
func (v *validator) value(val any, t reflect.Type, path string) {
	if val == nil {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		if _, ok := val.(string); !ok {
			v.add(path, "must be a string")
		}
	case reflect.Bool:
		if _, ok := val.(bool); !ok {
			v.add(path, "must be true or false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := val.(json.Number)
		if ok {
			_, err := strconv.ParseInt(n.String(), 10, t.Bits())
			ok = err == nil
		}
		if !ok {
			v.add(path, "must be an integer (%s)", t.Kind())
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := val.(json.Number)
		if ok {
			_, err := strconv.ParseUint(n.String(), 10, t.Bits())
			ok = err == nil
		}
		if !ok {
			v.add(path, "must be a non-negative integer (%s)", t.Kind())
		}
	case reflect.Float32, reflect.Float64:
		n, ok := val.(json.Number)
		if ok {
			_, err := strconv.ParseFloat(n.String(), t.Bits())
			ok = err == nil
		}
		if !ok {
			v.add(path, "must be a number")
		}
	case reflect.Slice:
		items, ok := val.([]any)
		if !ok {
			v.add(path, "must be an array")
			return
		}
		for i, item := range items {
			v.value(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Map:
		m, ok := val.(map[string]any)
		if !ok {
			v.add(path, "must be an object")
			return
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v.value(m[k], t.Elem(), path+"."+k)
		}
	case reflect.Struct:
		m, ok := val.(map[string]any)
		if !ok {
			v.add(path, "must be an object")
			return
		}
		v.object(m, t, path, nil)
	default:
		// interface{}: anything goes.
	}
}

type jsonField struct {
	name string
	typ  reflect.Type
}

// jsonFields are the fields encoding/json decodes into a struct, embedded
// structs' promoted.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		if f.Anonymous && tag == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				out = append(out, jsonFields(et)...)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		out = append(out, jsonField{tag, f.Type})
	}
	return out
}

// lookupField finds a key the way encoding/json does: the exact name,
// else a name equal ignoring case.
func lookupField(fields []jsonField, key string) (string, reflect.Type, bool) {
	for _, f := range fields {
		if f.name == key {
			return f.name, f.typ, true
		}
	}
	for _, f := range fields {
		if strings.EqualFold(f.name, key) {
			return f.name, f.typ, true
		}
	}
	return "", nil, false
}

// SameJSONShape reports how two types differ as JSON request bodies: the
// same field names at every level, with values of the same kind. The
// adapters' tests use it to check the generated schemas against the SDK
// they call.
func SameJSONShape(want, got reflect.Type) error {
	return sameShape(want, got, "", map[[2]reflect.Type]bool{})
}

func sameShape(a, b reflect.Type, path string, seen map[[2]reflect.Type]bool) error {
	for a.Kind() == reflect.Pointer {
		a = a.Elem()
	}
	for b.Kind() == reflect.Pointer {
		b = b.Elem()
	}
	if a.Kind() != b.Kind() {
		return fmt.Errorf("%s: %s, want %s", orRoot(path), b.Kind(), a.Kind())
	}
	switch a.Kind() {
	case reflect.Slice, reflect.Map:
		return sameShape(a.Elem(), b.Elem(), path+"[]", seen)
	case reflect.Struct:
		if seen[[2]reflect.Type{a, b}] {
			return nil
		}
		seen[[2]reflect.Type{a, b}] = true
		af, bf := jsonFields(a), jsonFields(b)
		bm := map[string]reflect.Type{}
		for _, f := range bf {
			bm[f.name] = f.typ
		}
		for _, f := range af {
			bt, ok := bm[f.name]
			if !ok {
				return fmt.Errorf("%s: missing", join(path, f.name))
			}
			delete(bm, f.name)
			if err := sameShape(f.typ, bt, join(path, f.name), seen); err != nil {
				return err
			}
		}
		for name := range bm {
			return fmt.Errorf("%s: unexpected field", join(path, name))
		}
	}
	return nil
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func orRoot(path string) string {
	if path == "" {
		return "(request)"
	}
	return path
}
