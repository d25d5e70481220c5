package yamlconfig_test

import (
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/yamlconfig"
)

// invalidGroups are bad node groups and the field each is wrong at; the
// gateway's REST tests send the same documents (libs/restapi/testdata)
// and expect the same field.
func invalidGroups(t *testing.T) []struct {
	Name, Field string
	Group       json.RawMessage
} {
	t.Helper()
	b, err := os.ReadFile("../../../../../libs/restapi/testdata/invalid-groups.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name, Field string
		Group       json.RawMessage
	}
	if err := json.Unmarshal(b, &cases); err != nil || len(cases) == 0 {
		t.Fatalf("fixture: %v", err)
	}
	return cases
}

// The loader rejects each of them at the same field as the REST API.
func TestSameErrorsAsTheAPI(t *testing.T) {
	for _, tt := range invalidGroups(t) {
		t.Run(tt.Name, func(t *testing.T) {
			// JSON is YAML: the group goes into the file as it is.
			file := "accounts: {dev: {regions: [r1]}}\ninstanceTemplates: {small: {account: dev}}\nnodeGroups:\n  - " + string(mergeID(t, tt.Group)) + "\n"
			_, err := yamlconfig.Parse("cfg.yaml", []byte(file), t.TempDir())
			var ce *yamlconfig.Error
			if !errors.As(err, &ce) {
				t.Fatalf("accepted or not a configuration error: %v", err)
			}
			want := "nodeGroups[0]." + tt.Field
			for _, p := range ce.Problems {
				if p.Path == want {
					return
				}
			}
			t.Errorf("no problem at %s: %v", want, err)
		})
	}
}

func mergeID(t *testing.T, group json.RawMessage) []byte {
	t.Helper()
	var g map[string]any
	if err := json.Unmarshal(group, &g); err != nil {
		t.Fatal(err)
	}
	g["id"] = "g"
	b, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
