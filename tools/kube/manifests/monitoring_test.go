package manifests_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/nodesmith/nodesmith/tools/kube/manifests"
)

var update = flag.Bool("update", false, "rewrite generated files (the PrometheusRule) instead of comparing them")

// rulesFile is the alert rules' single source of truth.
func rulesFile(t *testing.T) string {
	return filepath.Join(filepath.Dir(kustomizeDir(t)), "prometheus", "nodesmith-rules.yaml")
}

func monitoringComponent(t *testing.T) string {
	return filepath.Join(kustomizeDir(t), "components", "monitoring")
}

const ruleHeader = `# Code generated from deploy/prometheus/nodesmith-rules.yaml by ` + "`make monitoring`" + `. DO NOT EDIT.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: nodesmith
  labels:
    app.kubernetes.io/part-of: nodesmith
spec:
`

// generatePrometheusRule wraps the rules file (without its leading
// comment) as a PrometheusRule's spec: the operator's spec.groups is the
// rules file's groups, verbatim.
func generatePrometheusRule(rules []byte) []byte {
	var b bytes.Buffer
	b.WriteString(ruleHeader)
	body := false
	for line := range strings.Lines(string(rules)) {
		if !body && (strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "") {
			continue
		}
		body = true
		if strings.TrimSpace(line) == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString("  " + line)
	}
	return b.Bytes()
}

// TestPrometheusRuleIsGeneratedFromTheRulesFile keeps the operator's copy
// of the alerts in step with the plain rules file (`make monitoring`
// regenerates it).
func TestPrometheusRuleIsGeneratedFromTheRulesFile(t *testing.T) {
	rules, err := os.ReadFile(rulesFile(t))
	if err != nil {
		t.Fatal(err)
	}
	want := generatePrometheusRule(rules)
	path := filepath.Join(monitoringComponent(t), "prometheusrule.yaml")
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run `make monitoring`", path)
	}
	// And the wrapping is faithful: spec equals the rules file.
	var file, pr map[string]any
	if err := yaml.Unmarshal(rules, &file); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(got, &pr); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pr["spec"], file) {
		t.Fatal("the PrometheusRule's spec differs from the rules file")
	}
}

// ruleGroups is the rules-file (and PrometheusRule spec) format.
type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

var promDuration = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)

// checkRules is the structural check of alert rules (the expressions are
// parsed with Prometheus's own parser, and their metrics checked against
// what the services export, in dev/embedded).
func checkRules(t *testing.T, rg ruleGroups) {
	t.Helper()
	if len(rg.Groups) == 0 {
		t.Fatal("no rule groups")
	}
	seen := map[string]bool{}
	for _, g := range rg.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: a name and rules are required", g.Name)
		}
		for _, r := range g.Rules {
			if r.Alert == "" || r.Record != "" {
				t.Errorf("group %s: every rule is an alert (got %+v)", g.Name, r)
				continue
			}
			if seen[r.Alert] {
				t.Errorf("alert %s defined twice", r.Alert)
			}
			seen[r.Alert] = true
			if strings.TrimSpace(r.Expr) == "" || strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") {
				t.Errorf("alert %s: bad expr %q", r.Alert, r.Expr)
			}
			if r.For != "" && !promDuration.MatchString(r.For) {
				t.Errorf("alert %s: for %q is not a Prometheus duration", r.Alert, r.For)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, s)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("alert %s: no summary", r.Alert)
			}
		}
	}
	for _, a := range []string{
		"NodesmithNoLifecycleLeader", "NodesmithInstancesStuck", "NodesmithOrphanVMsFound", "NodesmithCloudErrorRate",
		"NodesmithCloudRateLimitSaturated", "NodesmithConsumerBacklog", "NodesmithRedeliveryStorm", "NodesmithAutoscalerGRPCErrors",
		"NodesmithCommandStreamNearLimit",
	} {
		if !seen[a] {
			t.Errorf("alert %s is missing", a)
		}
	}
}

// checkMonitoring is what components/monitoring promises: the alerts as a
// PrometheusRule, and the dashboard in a ConfigMap Grafana's sidecar picks
// up.
func checkMonitoring(t *testing.T, s *manifests.Set) {
	t.Helper()
	pr := find(s.Objects, "PrometheusRule", "nodesmith")
	if pr == nil {
		t.Fatal("no PrometheusRule")
	}
	if pr.GetAPIVersion() != "monitoring.coreos.com/v1" {
		t.Errorf("PrometheusRule apiVersion %s", pr.GetAPIVersion())
	}
	spec, _, _ := unstructured.NestedMap(pr.Object, "spec")
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	var rg ruleGroups
	if err := json.Unmarshal(raw, &rg); err != nil {
		t.Fatal(err)
	}
	checkRules(t, rg)

	cm := find(s.Objects, "ConfigMap", "nodesmith-grafana-dashboard")
	if cm == nil {
		t.Fatal("no dashboard ConfigMap")
	}
	if cm.GetLabels()["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v, want grafana_dashboard: \"1\"", cm.GetLabels())
	}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	var dash struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(data["nodesmith-dashboard.json"]), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	exprs := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel of type %s has an empty query", p.Type)
			}
			exprs++
		}
	}
	if dash.UID == "" || dash.Title == "" || exprs < 10 {
		t.Errorf("dashboard uid %q title %q with %d queries: want a titled dashboard with its panels", dash.UID, dash.Title, exprs)
	}
}

// TestRulesFile checks the plain rules file on its own (what a
// non-operator Prometheus loads).
func TestRulesFile(t *testing.T) {
	data, err := os.ReadFile(rulesFile(t))
	if err != nil {
		t.Fatal(err)
	}
	var rg ruleGroups
	if err := yaml.UnmarshalStrict(data, &rg); err != nil {
		t.Fatal(err)
	}
	checkRules(t, rg)
}
