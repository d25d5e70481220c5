package migrate_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/migrate"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func convertFixture(t *testing.T) *migrate.Result {
	t.Helper()
	data, err := os.ReadFile("testdata/prototype-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := migrate.ConvertConfig(data, migrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestConvertConfigGolden(t *testing.T) {
	res := convertFixture(t)
	golden := filepath.Join("testdata", "nodesmith.golden.yaml")
	if *update {
		if err := os.WriteFile(golden, res.YAML, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(res.YAML, want) {
		t.Errorf("converted file differs from %s (go test -update to accept):\n%s", golden, res.YAML)
	}
}

// The account's keys are returned for the Secret and never written out.
func TestConvertConfigKeepsKeysOut(t *testing.T) {
	res := convertFixture(t)
	for _, secret := range []string{"fake-secret-id-for-tests", "fake-secret-key-for-tests"} {
		if bytes.Contains(res.YAML, []byte(secret)) {
			t.Errorf("the converted file contains the key %q", secret)
		}
		for _, w := range res.Warnings {
			if strings.Contains(w.String(), secret) {
				t.Errorf("warning %q contains the key", w)
			}
		}
	}
	if len(res.Credentials) != 1 || res.Credentials[0] != (migrate.Credentials{Account: "prod-account", SecretID: "fake-secret-id-for-tests", SecretKey: "fake-secret-key-for-tests"}) {
		t.Errorf("credentials %+v", res.Credentials)
	}
}

// Every field that is not carried over is reported with its line.
func TestConvertConfigWarnings(t *testing.T) {
	res := convertFixture(t)
	var got []string
	for _, w := range res.Warnings {
		got = append(got, w.String())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{
		"line 5: cloudProviderOption.tencentcloud.prod-account: the account's keys are not written",
		"line 26: cloudProviderOption.instanceParameter.worker-s5.spotPolicy: unknown instance parameter field",
		"line 23: cloudProviderOption.instanceParameter.worker-s5.parameter.LoginSettings: moved to secretParameters",
		"line 25: cloudProviderOption.instanceParameter.worker-s5.parameter.InstanceCount: set by nodesmith",
		"line 56: nodeGroups[0].instances: the prototype's instances are state",
		"line 58: nodeGroups[0].priority: unknown node group field",
		"line 31: nodeGroups[0].targetSize: applies only when nodesmith first creates the group",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no warning %q in:\n%s", want, all)
		}
	}
	if res.Groups["worker-group"] != "worker-s5" {
		t.Errorf("groups %v", res.Groups)
	}
	if ti := res.Templates["worker-s5"]; ti != (migrate.TemplateInfo{Provider: "tencentcloud", Account: "prod-account", Region: "ap-beijing", Zone: "ap-beijing-5"}) {
		t.Errorf("template %+v", ti)
	}
}

func TestConvertConfigProviderIDTemplates(t *testing.T) {
	for _, tc := range []struct{ in, want, warn string }{
		{"externalgrpc://tencentcloud/acct/ap-beijing/{{InstanceID}}", "", ""},
		{"qcloud:///{{Zone}}/{{InstanceID}}", "qcloud:///{{.Zone}}/{{.CloudID}}", ""},
		{"tencentcloud://{{Region}}/{{ InstanceID }}", "tencentcloud://{{.Region}}/{{.CloudID}}", ""},
		{"custom/{{Weird}}/{{InstanceID}}", "custom/{{Weird}}/{{.CloudID}}", "{{Weird}} has no nodesmith equivalent"},
		{"custom/{{Region}}", "custom/{{.Region}}", "names no instance id"},
	} {
		in := "cloudProviderOption:\n  tencentcloud:\n    acct: {}\n  instanceParameter:\n    t:\n      providerIdTemplate: \"" + tc.in +
			"\"\n      parameter:\n        Placement: {Zone: ap-beijing-5}\n"
		res, err := migrate.ConvertConfig([]byte(in), migrate.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Templates["t"].ProviderIDTemplate; got != tc.want {
			t.Errorf("%s: template %q, want %q", tc.in, got, tc.want)
		}
		var ws []string
		for _, w := range res.Warnings {
			ws = append(ws, w.String())
		}
		if tc.warn != "" && !strings.Contains(strings.Join(ws, "\n"), tc.warn) {
			t.Errorf("%s: no warning %q in %v", tc.in, tc.warn, ws)
		}
		if got := migrate.RenderProviderID(res.Templates["t"], "g", "ins-1"); tc.want == "" && got != "externalgrpc://tencentcloud/acct/ap-beijing/ins-1" {
			t.Errorf("%s renders %q", tc.in, got)
		}
	}
}

func TestConvertConfigBadInput(t *testing.T) {
	for _, in := range []string{"", "key: [unclosed", "- a list"} {
		if res, err := migrate.ConvertConfig([]byte(in), migrate.Options{}); err == nil && len(res.Warnings) == 0 {
			t.Errorf("%q: neither an error nor a warning", in)
		}
	}
}
