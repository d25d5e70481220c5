package migrate_test

import (
	"os"
	"reflect"
	"testing"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/migrate"
)

func TestParseStatusAndPlan(t *testing.T) {
	data, err := os.ReadFile("testdata/nodegroup-status.yaml")
	if err != nil {
		t.Fatal(err)
	}
	groups, err := migrate.ParseStatus(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].ID != "worker-group" || len(groups[0].Instances) != 4 {
		t.Fatalf("groups %+v", groups)
	}
	res := convertFixture(t)
	plan := migrate.Plan(groups, res.Templates, res.Groups)
	want := []migrate.AdoptVM{
		{CloudID: "ins-proto001", NodeName: "proto-node-1", ProviderID: "externalgrpc://tencentcloud/prod-account/ap-beijing/ins-proto001", PrivateIP: "10.0.1.11"},
		// No providerID in the status: rendered from the converted template.
		{CloudID: "ins-proto002", NodeName: "proto-node-2", ProviderID: "externalgrpc://tencentcloud/prod-account/ap-beijing/ins-proto002", PrivateIP: "10.0.1.12"},
	}
	if len(plan) != 1 || !reflect.DeepEqual(plan[0].Adopt, want) || len(plan[0].Skipped) != 2 {
		t.Fatalf("plan %+v", plan)
	}
	// Without the converted config, an instance without providerID is skipped.
	plan = migrate.Plan(groups, nil, nil)
	if len(plan[0].Adopt) != 1 || len(plan[0].Skipped) != 3 {
		t.Errorf("plan without config %+v", plan)
	}
}

func TestParseStatusShapes(t *testing.T) {
	for name, in := range map[string]string{
		"json data":       `{"nodeGroups":[{"id":"g","instances":[{"InstanceID":"ins-1","Name":"n1","Status":"Running"}]}]}`,
		"list":            `[{"id":"g","instances":[{"id":"ins-1","nodeName":"n1","state":"running"}]}]`,
		"keyed instances": `{"nodeGroups":[{"id":"g","instances":{"ins-1":{"name":"n1","status":"Running"}}}]}`,
		"keyed groups":    `{"g":{"instances":[{"instanceId":"ins-1","hostname":"n1","stage":"Running"}]}}`,
		"configmap json":  `{"kind":"ConfigMap","data":{"nodegroup-status":"{\"nodeGroups\":[{\"id\":\"g\",\"instances\":[{\"instanceID\":\"ins-1\",\"nodeName\":\"n1\",\"status\":\"Running\"}]}]}"}}`,
	} {
		groups, err := migrate.ParseStatus([]byte(in))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		plan := migrate.Plan(groups, map[string]migrate.TemplateInfo{"t": {Provider: "tencentcloud", Account: "a", Region: "r"}}, map[string]string{"g": "t"})
		if len(plan) != 1 || len(plan[0].Adopt) != 1 || plan[0].Adopt[0].CloudID != "ins-1" || plan[0].Adopt[0].NodeName != "n1" ||
			plan[0].Adopt[0].ProviderID != "externalgrpc://tencentcloud/a/r/ins-1" {
			t.Errorf("%s: plan %+v", name, plan)
		}
	}
	for _, bad := range []string{`"a string"`, `{"kind":"ConfigMap"}`, `[{"instances":[]}]`, `[1]`, `{{`} {
		if _, err := migrate.ParseStatus([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
