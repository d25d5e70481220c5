package restapi

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// decodeFile is what lifecycle's loader does with its (YAML-to-JSON)
// file and the gateway with a body: Decode, then Validate.
func decodeFile(t *testing.T, doc string) (*ConfigFile, []Warning, FieldErrors) {
	t.Helper()
	var f ConfigFile
	w, err := Decode([]byte(doc), &f, DecodeOptions{})
	if err != nil {
		var fe FieldErrors
		if !errors.As(err, &fe) {
			t.Fatalf("decode: %v", err)
		}
		return nil, w, fe
	}
	return &f, w, f.Validate()
}

func TestValidateReportsFieldPaths(t *testing.T) {
	const tmpl = `"instanceTemplates": {"small": {"account": "dev"}}, "accounts": {"dev": {"regions": ["r1"]}}, `
	group := func(body string) string {
		return `{` + tmpl + `"nodeGroups": [{"id": "ok", "maxSize": 1, "instanceTemplate": "small"}, {"id": "g", "instanceTemplate": "small", ` + body + `}]}`
	}
	tests := []struct {
		name, doc, path, msg string
	}{
		{"max required", group(`"minSize": 0`), "nodeGroups[1].maxSize", "required"},
		{"max negative", group(`"maxSize": -1`), "nodeGroups[1].maxSize", "must not be negative"},
		{"min above max", group(`"minSize": 3, "maxSize": 2`), "nodeGroups[1].minSize", "must not exceed maxSize (2), got 3"},
		{"min negative", group(`"minSize": -1, "maxSize": 2`), "nodeGroups[1].minSize", "must not be negative"},
		{"target above max", group(`"maxSize": 2, "targetSize": 3`), "nodeGroups[1].targetSize", "must be within [minSize, maxSize] = [0, 2], got 3"},
		{"bad duration", group(`"maxSize": 2, "autoscalingOptions": {"scaleDownUnneededTime": "5 minutes"}`), "nodeGroups[1].autoscalingOptions.scaleDownUnneededTime", "invalid duration"},
		{"negative duration", group(`"maxSize": 2, "autoscalingOptions": {"scaleDownUnreadyTime": "-1m"}`), "nodeGroups[1].autoscalingOptions.scaleDownUnreadyTime", "must not be negative"},
		{"zero provision time", group(`"maxSize": 2, "autoscalingOptions": {"maxNodeProvisionTime": "0s"}`), "nodeGroups[1].autoscalingOptions.maxNodeProvisionTime", "must be positive"},
		{"threshold", group(`"maxSize": 2, "autoscalingOptions": {"scaleDownUtilizationThreshold": 1.5}`), "nodeGroups[1].autoscalingOptions.scaleDownUtilizationThreshold", "within [0, 1]"},
		{"taint effect", group(`"maxSize": 2, "nodeTemplate": {"labels": {"a": "b"}, "taints": [{"key": "k", "effect": "Never"}]}`), "nodeGroups[1].nodeTemplate.taints[0].effect", "must be one of"},
		{"taint key", group(`"maxSize": 2, "nodeTemplate": {"taints": [{"effect": "NoSchedule"}]}`), "nodeGroups[1].nodeTemplate.taints[0].key", "required"},
		{"onFailure", group(`"maxSize": 2, "hooks": {"beforeDelete": {"script": "x", "onFailure": "retry"}}`), "nodeGroups[1].hooks.beforeDelete.onFailure", "must be continue or block"},
		{"onFailure after create", group(`"maxSize": 2, "hooks": {"afterCreated": {"script": "x", "onFailure": "block"}}`), "nodeGroups[1].hooks.afterCreated.onFailure", "only applies to beforeDelete"},
		{"file and script", group(`"maxSize": 2, "hooks": {"afterCreated": {"script": "x", "file": "a.sh"}}`), "nodeGroups[1].hooks.afterCreated", "set either file or script"},
		{"hook timeout", group(`"maxSize": 2, "hooks": {"afterCreated": {"script": "x", "timeout": "soon"}}`), "nodeGroups[1].hooks.afterCreated.timeout", "invalid duration"},
		{"hook env", group(`"maxSize": 2, "hooks": {"afterCreated": {"script": "x", "env": {"1X": "y"}}}`), "nodeGroups[1].hooks.afterCreated.env", "not a valid environment variable name"},
		{"parallelism", group(`"maxSize": 2, "parallelism": {"create": -1}`), "nodeGroups[1].parallelism.create", "must not be negative"},
		{"adopt without labels", group(`"maxSize": 2, "adoptExisting": true`), "nodeGroups[1].adoptExisting", "label"},
		{"inline parameters", group(`"maxSize": 2, "instanceTemplate": {"account": "dev", "parameters": [1]}`), "", "instanceTemplate"},
		{"unknown field", group(`"maxSize": 2, "colour": "red"`), "nodeGroups[1].colour", `unknown field "colour"`},
		{"typo", group(`"maxSize": 2, "nodeTemplate": {"lables": {}}`), "nodeGroups[1].nodeTemplate.lables", `did you mean "labels"?`},
		{"wrong type", group(`"maxSize": "lots"`), "nodeGroups[1].maxSize", `cannot unmarshal string "lots" into an integer`},
		{"out of range", group(`"maxSize": 3000000000`), "nodeGroups[1].maxSize", "32 bits"},
		{"duplicate id", `{"nodeGroups": [{"id": "a", "maxSize": 1, "instanceTemplate": "t"}, {"id": "a", "maxSize": 1, "instanceTemplate": "t"}]}`, "nodeGroups[1].id", `duplicate id "a"`},
		{"id not a DNS-1123 label", `{"nodeGroups": [{"id": "GPU_a", "maxSize": 1, "instanceTemplate": "t"}]}`, "nodeGroups[0].id", "DNS-1123 label"},
		{"template name", `{"instanceTemplates": {"a..b": {"account": "a"}}}`, "instanceTemplates.a..b", "not two dots in a row"},
		{"account name", `{"accounts": {"a b": {"regions": ["r"]}}}`, "accounts.a b", "may contain only"},
		{"no id", `{"nodeGroups": [{"maxSize": 1, "instanceTemplate": "t"}]}`, "nodeGroups[0].id", "required"},
		{"template without account", `{"instanceTemplates": {"t": {"zone": "z"}}}`, "instanceTemplates.t.account", "required"},
		{"template price", `{"instanceTemplates": {"t": {"account": "a", "hourlyPrice": -1}}}`, "instanceTemplates.t.hourlyPrice", "must not be negative"},
		{"credentials in the file", `{"accounts": {"a": {"credentials": {"secretId": "x", "secretKey": "y"}}}}`, "accounts.a.credentials", "not part of the configuration file"},
		{"duplicate region", `{"accounts": {"a": {"regions": ["r", "r"]}}}`, "accounts.a.regions[1]", "duplicate region"},
		{"offering field", `{"instanceTemplates": {"t": {"account": "a", "offerings": [{"zone": "z", "instanceType": "t"}, {"zone": "z", "size": 1}]}}}`, "instanceTemplates.t.offerings[1].size", `unknown field "size"`},
		{"offering zone type", `{"instanceTemplates": {"t": {"account": "a", "offerings": [{"zone": 3, "instanceType": "t"}]}}}`, "instanceTemplates.t.offerings[0].zone", "cannot unmarshal"},
		{"max price type", `{"instanceTemplates": {"t": {"account": "a", "capacityType": "spot", "maxPrice": 0.5}}}`, "instanceTemplates.t.maxPrice", "cannot unmarshal"},
		{"alias and name", group(`"maxSize": 2, "autoscalingOptions": {"scaleDownUnneeded": "1m", "scaleDownUnneededTime": "2m"}`), "nodeGroups[1].autoscalingOptions.scaleDownUnneeded", "set only scaleDownUnneededTime"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, errs := decodeFile(t, tt.doc)
			for _, e := range errs {
				if strings.HasPrefix(e.Field, tt.path) && strings.Contains(e.Error(), tt.msg) {
					return
				}
			}
			t.Errorf("no error at %s with %q; got %v", tt.path, tt.msg, errs)
		})
	}
}

func TestValidDocumentPasses(t *testing.T) {
	f, w, errs := decodeFile(t, `{
  "accounts": {"dev": {"regions": ["r1"]}},
  "instanceTemplates": {"small": {"account": "dev", "parameters": {"ImageId": "img-1"}}},
  "nodeGroups": [
    {"id": "zero", "maxSize": 0, "instanceTemplate": "small"},
    {"id": "w", "minSize": 1, "maxSize": 3, "targetSize": 2, "instanceTemplate": {"name": "small"},
     "autoscalingOptions": {"scaleDownUnneededTime": "10m", "maxNodeProvisionTime": "15m"},
     "hooks": {"afterCreated": {"file": "join.sh", "timeout": "5m"}, "beforeDelete": {"script": "drain", "onFailure": "BLOCK"}}}
  ]}`)
	if len(errs) != 0 || len(w) != 0 {
		t.Fatalf("errors %v, warnings %v", errs, w)
	}
	if g := f.NodeGroups[0]; g.InstanceTemplate.Name != "small" || !g.InstanceTemplate.ByName() {
		t.Errorf("template by string: %+v", g.InstanceTemplate)
	}
	if d := Duration(f.NodeGroups[1].AutoscalingOptions.ScaleDownUnneededTime); d.Minutes() != 10 {
		t.Errorf("duration %v", d)
	}
	if v, _ := OnFailureOf(f.NodeGroups[1].Hooks.BeforeDelete.OnFailure); v != OnFailureBlock {
		t.Errorf("onFailure %q", v)
	}
}

// The old spellings still work, each with a warning naming its path.
func TestDeprecatedAliasesAreAcceptedWithAWarning(t *testing.T) {
	f, w, errs := decodeFile(t, `{
  "accounts": {"dev": {"region": "r1"}},
  "nodeGroups": [{"id": "w", "maxSize": 3, "instanceTemplate": "small",
    "autoscalingOptions": {"scaleDownUnneeded": "10m", "scaleDownUnready": "20m", "maxNodeProvision": "15m"},
    "hooks": {"beforeDelete": {"script": "x", "onFailure": "ON_FAILURE_BLOCK"}}}]}`)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	got := map[string]bool{}
	for _, x := range w {
		got[x.Field] = true
		if !strings.Contains(x.Message, "deprecated") {
			t.Errorf("warning %s", x)
		}
	}
	for _, want := range []string{"accounts.dev.region", "nodeGroups[0].autoscalingOptions.scaleDownUnneeded",
		"nodeGroups[0].autoscalingOptions.scaleDownUnready", "nodeGroups[0].autoscalingOptions.maxNodeProvision"} {
		if !got[want] {
			t.Errorf("no warning at %s: %v", want, w)
		}
	}
	o := f.NodeGroups[0].AutoscalingOptions
	if o.ScaleDownUnneededTime != "10m" || o.ScaleDownUnreadyTime != "20m" || o.MaxNodeProvisionTime != "15m" {
		t.Errorf("options %+v", o)
	}
	if !reflect.DeepEqual(f.Accounts["dev"].Regions, []string{"r1"}) {
		t.Errorf("regions %v", f.Accounts["dev"].Regions)
	}
	if v, ok := OnFailureOf(f.NodeGroups[0].Hooks.BeforeDelete.OnFailure); !ok || v != OnFailureBlock {
		t.Errorf("onFailure %q", v)
	}
}

func TestHookRulesDifferBetweenFileAndAPI(t *testing.T) {
	h := HookSpec{File: "a.sh"}
	if errs := h.Validate(); len(errs) == 0 || errs[0].Field != "file" {
		t.Errorf("API hook with a file: %v", errs)
	}
	g := GroupSpec{MaxSize: new(int32(1)), InstanceTemplate: &InstanceTemplateSpec{InstanceTemplate: InstanceTemplate{Name: "t"}},
		Hooks: &HooksSpec{AfterCreated: &HookSpec{Name: "join"}}}
	if errs := g.Validate(); len(errs) != 0 {
		t.Errorf("group naming a catalog hook: %v", errs)
	}
	if errs := g.ValidateIn(InFile); len(errs) == 0 || errs[0].Field != "hooks.afterCreated" {
		t.Errorf("file group naming a hook without a script: %v", errs)
	}
}

// The offering fields decode as written, and a template that sets only
// them is an inline definition, not a reference by name.
func TestOfferingFieldsDecode(t *testing.T) {
	f, _, errs := decodeFile(t, `{"accounts": {"a": {"regions": ["r"]}}, "instanceTemplates": {"t": {"account": "a", "capacityType": "spot", "maxPrice": "0.5",
		"offeringStrategy": "balanced", "offerings": [{"zone": "z1", "instanceType": "t1", "subnetId": "s1"}, {"zone": "z2", "instanceType": "t1", "capacityType": "on-demand"}]}},
		"nodeGroups": [{"id": "g", "maxSize": 1, "instanceTemplate": {"name": "t", "offerings": [{"zone": "z", "instanceType": "t"}]}}]}`)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	tm := f.InstanceTemplates["t"]
	want := []Offering{{Zone: "z1", InstanceType: "t1", SubnetID: "s1"}, {Zone: "z2", InstanceType: "t1", CapacityType: "on-demand"}}
	if tm.CapacityType != "spot" || tm.MaxPrice != "0.5" || tm.OfferingStrategy != "balanced" || !reflect.DeepEqual(tm.Offerings, want) {
		t.Errorf("template %+v", tm)
	}
	if f.NodeGroups[0].InstanceTemplate.ByName() {
		t.Error("a template with offerings is taken for a reference by name")
	}
}
