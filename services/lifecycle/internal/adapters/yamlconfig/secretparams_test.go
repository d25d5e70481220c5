package yamlconfig_test

import (
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/yamlconfig"
)

// secretParameters become per-parameter JSON values (lifecycle seals them
// before storing); a parameter cannot be both secret and plain, and an
// error never shows the value.
func TestSecretParameters(t *testing.T) {
	const cfg = `
accounts:
  dev: {region: ap-guangzhou}
instanceTemplates:
  small:
    account: dev
    zone: ap-guangzhou-3
    parameters: {ImageId: img-1}
    secretParameters:
      LoginSettings: {Password: "pw-value-1"}
nodeGroups:
  - {id: workers, maxSize: 2, instanceTemplate: small}
`
	c, err := yamlconfig.Parse("f.yaml", []byte(cfg), "")
	if err != nil {
		t.Fatal(err)
	}
	tm := c.Groups[0].Template
	if got := tm.SecretParameters["LoginSettings"]; got != `{"Password":"pw-value-1"}` {
		t.Errorf("secretParameters = %v", tm.SecretParameters)
	}
	if strings.Contains(tm.ParametersJSON, "pw-value-1") {
		t.Errorf("the secret parameter is in the plain parameters: %s", tm.ParametersJSON)
	}
	dup := strings.Replace(cfg, "parameters: {ImageId: img-1}", "parameters: {ImageId: img-1, LoginSettings: {Password: x}}", 1)
	_, err = yamlconfig.Parse("f.yaml", []byte(dup), "")
	if err == nil || !strings.Contains(err.Error(), "secretParameters.LoginSettings") || strings.Contains(err.Error(), "pw-value-1") {
		t.Errorf("duplicate parameter: %v", err)
	}
}
