package cloudspec

import (
	"encoding/json"
	"strings"
	"testing"
)

// Whatever a client sends, Reconcile and ValidateParameters answer with
// errors, never a panic, and reconciled parameters are a JSON object that
// names the template's zone and instance type.
func FuzzTemplate(f *testing.F) {
	for _, s := range []string{"", "null", "{}", "[]", `{"Placement":"z"}`, `{"Placement":{"Zone":5}}`,
		`{"DataDisks":[{"DiskSize":"x"},null]}`, `{"SystemDisk":{"DiskSize":1e400}}`, `{"ZoneId":"z","Amount":1}`, `{"a":`} {
		f.Add(s, "z", "t", "Password")
	}
	f.Fuzz(func(t *testing.T, params, zone, instanceType, secret string) {
		for _, name := range Names() {
			p, _ := Lookup(name)
			tpl := Template{Zone: zone, InstanceType: instanceType, Parameters: params}
			errs := p.Reconcile(&tpl)
			_ = p.ValidateParameters(params, secret)
			if errs != nil {
				continue
			}
			_ = p.ValidateParameters(tpl.Parameters)
			if tpl.Parameters == "" {
				if zone != "" || instanceType != "" {
					t.Fatalf("%s: zone %q / type %q not in the parameters", name, zone, instanceType)
				}
				continue
			}
			var obj map[string]any
			dec := json.NewDecoder(strings.NewReader(tpl.Parameters))
			dec.UseNumber()
			if err := dec.Decode(&obj); err != nil || obj == nil {
				t.Fatalf("%s: reconciled parameters %q are not an object: %v", name, tpl.Parameters, err)
			}
			if zone != "" && tpl.Zone != zone || instanceType != "" && tpl.InstanceType != instanceType {
				t.Fatalf("%s: template changed: %+v", name, tpl)
			}
		}
	})
}
