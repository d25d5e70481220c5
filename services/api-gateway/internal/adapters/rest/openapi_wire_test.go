package rest

import (
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"testing"
)

// openAPISchemas maps openapi.json's component schemas to the wire types
// the handlers marshal.
var openAPISchemas = map[string]any{
	"Error": ErrorBody{}, "ScaleRequest": ScaleRequest{}, "GroupList": GroupList{}, "Group": Group{},
	"InstanceList": InstanceList{}, "Instance": Instance{}, "Status": StatusView{}, "HookSpec": HookSpec{},
	"GroupSpec": GroupSpec{}, "TemplateInfo": TemplateInfo{}, "TemplateList": TemplateList{}, "Account": Account{},
	"AccountList": AccountList{}, "HookInfo": HookInfo{}, "HookList": HookList{}, "TransitionList": TransitionList{},
	"TemplateSpec": InstanceTemplateSpec{}, "AccountSpec": AccountSpec{}, "OrphanRelease": orphanRelease{},
	"WatchSnapshot": WatchSnapshot{}, "WatchDeletedGroup": WatchDeletedGroup{}, "AdoptVM": AdoptVM{},
	"AdoptRequest": AdoptRequest{}, "AdoptOutcome": AdoptOutcome{}, "AdoptResponse": AdoptResponse{},
	"UnavailableOfferingList": UnavailableOfferingList{},
}

// Every object schema of openapi.json documents exactly the JSON keys its
// wire type has (every field set), and requires only keys that exist.
func TestOpenAPISchemasMatchWireTypes(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
				Required   []string                   `json:"required"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	for name, v := range openAPISchemas {
		schema, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("openapi.json has no schema %s", name)
			continue
		}
		full := reflect.New(reflect.TypeOf(v)).Elem()
		fill(full, name)
		b, err := json.Marshal(full.Interface())
		if err != nil {
			t.Fatal(err)
		}
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(b, &keys); err != nil {
			t.Fatal(err)
		}
		got, want := sortedKeys(keys), sortedKeys(schema.Properties)
		if !slices.Equal(got, want) {
			t.Errorf("schema %s: properties %v, the wire type %T marshals %v", name, want, v, got)
		}
		for _, r := range schema.Required {
			if _, ok := keys[r]; !ok {
				t.Errorf("schema %s requires %q, which %T lacks", name, r, v)
			}
		}
	}
}

func sortedKeys(m map[string]json.RawMessage) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
