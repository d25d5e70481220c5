package rest

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/wire.golden")

// wireTypes are the REST API's JSON bodies, by the name the golden file
// gives them.
var wireTypes = []struct {
	name string
	v    any
}{
	{"Group", Group{}}, {"InstanceTemplate", InstanceTemplate{}}, {"NodeTemplate", NodeTemplate{}},
	{"Taint", Taint{}}, {"AutoscalingOptions", AutoscalingOptions{}}, {"Hook", Hook{}},
	{"Parallelism", Parallelism{}}, {"Instance", Instance{}}, {"ErrorInfo", ErrorInfo{}},
	{"Transition", Transition{}}, {"InstanceList", InstanceList{}}, {"GroupList", GroupList{}},
	{"StatusView", StatusView{}}, {"OrphansView", OrphansView{}}, {"GroupStatus", GroupStatus{}},
	{"TemplateInfo", TemplateInfo{}}, {"TemplateList", TemplateList{}}, {"Account", Account{}},
	{"AccountCredentials", AccountCredentials{}}, {"AccountList", AccountList{}}, {"HookInfo", HookInfo{}},
	{"HookList", HookList{}}, {"TransitionEntry", TransitionEntry{}}, {"TransitionList", TransitionList{}},
	{"AdoptVM", AdoptVM{}}, {"AdoptRequest", AdoptRequest{}}, {"AdoptOutcome", AdoptOutcome{}},
	{"AdoptResponse", AdoptResponse{}}, {"ErrorBody", ErrorBody{}}, {"WatchSnapshot", WatchSnapshot{}},
	{"WatchDeletedGroup", WatchDeletedGroup{}}, {"ScaleRequest", ScaleRequest{}}, {"GroupSpec", GroupSpec{}},
	{"InstanceTemplateSpec", InstanceTemplateSpec{}}, {"HooksSpec", HooksSpec{}}, {"HookSpec", HookSpec{}},
	{"AccountSpec", AccountSpec{}}, {"CredentialsSpec", CredentialsSpec{}}, {"OrphanRelease", orphanRelease{}},
	{"GroupOfferings", GroupOfferings{}}, {"OfferingStatus", OfferingStatus{}}, {"OfferingReason", OfferingReason{}},
	{"UnavailableOffering", UnavailableOffering{}}, {"UnavailableOfferingList", UnavailableOfferingList{}},
}

// fill sets every field of v (recursively) to a value that is not zero
// and names its field, so the golden output shows every JSON key.
func fill(v reflect.Value, name string) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(name)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(9)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(0.25)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), name)
		v.Set(p)
	case reflect.Interface:
		v.Set(reflect.ValueOf(name))
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k := reflect.New(v.Type().Key()).Elem()
		fill(k, name+"Key")
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, name+"Value")
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(fmt.Sprintf(`{"%s":1}`, name)))
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), name+"Item")
		v.Set(s)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				fill(v.Field(i), f.Name)
			}
		}
	default:
		panic(fmt.Sprintf("fill: unhandled kind %s", v.Kind()))
	}
}

// The REST API's JSON, empty and with every field set, is pinned byte for
// byte by testdata/wire.golden (go test -run TestWireGolden -update
// rewrites it): a change to a body's JSON shows in review.
func TestWireGolden(t *testing.T) {
	var out bytes.Buffer
	for _, wt := range wireTypes {
		full := reflect.New(reflect.TypeOf(wt.v)).Elem()
		fill(full, wt.name)
		for _, c := range []struct {
			label string
			v     any
		}{{"empty", wt.v}, {"full", full.Interface()}} {
			b, err := json.MarshalIndent(c.v, "", "  ")
			if err != nil {
				t.Fatalf("%s (%s): %v", wt.name, c.label, err)
			}
			fmt.Fprintf(&out, "== %s (%s)\n%s\n", wt.name, c.label, b)
		}
	}
	const golden = "testdata/wire.golden"
	if *updateGolden {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestWireGolden -update)", err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("the REST API's JSON differs from %s (run go test -run TestWireGolden -update and review the diff):\n%s", golden, out.String())
	}
}
