package yamlconfig_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/yamlconfig"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// The spellings the file used before it shared libs/restapi's schema
// still load, each with a warning naming the file, the path and the line.
func TestDeprecatedSpellingsLoadWithAWarning(t *testing.T) {
	cfg, err := yamlconfig.Parse("cfg.yaml", []byte(`
accounts:
  dev: {region: r1}
instanceTemplates:
  small: {account: dev}
nodeGroups:
  - id: w
    maxSize: 3
    instanceTemplate: small
    autoscalingOptions:
      scaleDownUnneeded: 10m
    hooks:
      beforeDelete: {script: drain, onFailure: ON_FAILURE_BLOCK}
`), "")
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Groups[0]
	if g.Autoscaling.ScaleDownUnneeded != 10*time.Minute || g.Hooks.BeforeDelete.OnFailure != domain.OnFailureBlock || g.Template.Region != "r1" {
		t.Errorf("group %+v", g)
	}
	all := strings.Join(cfg.Warnings, "\n")
	for _, want := range []string{
		"cfg.yaml: accounts.dev.region: is deprecated: use regions (line 3)",
		"cfg.yaml: nodeGroups[0].autoscalingOptions.scaleDownUnneeded: is deprecated: use scaleDownUnneededTime (line 11)",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings lack %q:\n%s", want, all)
		}
	}
}

// A group may define its template inline (as in the REST API), and keep
// itself at zero with maxSize 0.
func TestInlineTemplateAndMaxZero(t *testing.T) {
	cfg, err := yamlconfig.Parse("cfg.yaml", []byte(`
accounts: {dev: {regions: [r1]}}
nodeGroups:
  - id: parked
    maxSize: 0
    instanceTemplate: {account: dev, zone: r1-1, instanceType: S5.SMALL1}
`), "")
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Groups[0]
	if g.MaxSize != 0 || g.Template.Name != "parked" || g.Template.Account != "dev" || g.Template.Region != "r1" || g.Template.Provider != "tencentcloud" {
		t.Errorf("group %+v", g)
	}
	_, err = yamlconfig.Parse("cfg.yaml", []byte("nodeGroups:\n  - id: x\n    maxSize: 1\n    instanceTemplate: {zone: z}\n"), "")
	if err == nil || !strings.Contains(err.Error(), "nodeGroups[0].instanceTemplate.account: required (line 4)") {
		t.Errorf("inline template without an account: %v", err)
	}
}
