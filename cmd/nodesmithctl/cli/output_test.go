package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/client"
	"github.com/nodesmith/nodesmith/libs/restapi"
)

func TestProgressBar(t *testing.T) {
	for _, tc := range []struct {
		target int32
		counts map[string]int
		want   string
	}{
		{5, map[string]int{}, "[----------] 0/5 running"},
		{5, map[string]int{"RUNNING": 2, "CREATING": 1, "PENDING": 2}, "[####++++++] 2/5 running, 3 provisioning"},
		{4, map[string]int{"RUNNING": 4}, "[##########] 4/4 running"},
		{2, map[string]int{"RUNNING": 4, "PENDING_DELETION": 1, "DELETING": 1}, "[##########] 4/2 running, 2 deleting"},
		{0, map[string]int{}, "[##########] 0/0 running"},
		{0, map[string]int{"RUNNING": 1, "DELETING": 1}, "[----------] 1/0 running, 1 deleting"},
	} {
		if got := progressBar(restapi.Group{TargetSize: tc.target, Instances: tc.counts}, 10); got != tc.want {
			t.Errorf("target %d %v: %q, want %q", tc.target, tc.counts, got, tc.want)
		}
	}
}

func TestAge(t *testing.T) {
	now := time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC)
	for ts, want := range map[string]string{
		"":                     "-",
		"garbage":              "-",
		"2026-01-02T23:59:30Z": "30s",
		"2026-01-02T23:50:00Z": "10m",
		"2026-01-02T21:00:00Z": "3h",
		"2026-01-01T00:00:00Z": "2d",
		"2026-01-03T00:00:05Z": "0s",
	} {
		if got := age(ts, now); got != want {
			t.Errorf("age(%q) = %q, want %q", ts, got, want)
		}
	}
}

func TestSelector(t *testing.T) {
	sel, err := parseSelector([]string{"pool=web,gpu", "zone!=a"})
	if err != nil {
		t.Fatal(err)
	}
	for labels, want := range map[string]bool{
		"pool=web,gpu=,zone=b": true,
		"pool=web,gpu=1":       true,
		"pool=web,gpu=,zone=a": false,
		"pool=web":             false,
		"pool=batch,gpu=":      false,
	} {
		m := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		if got := sel.matches(m); got != want {
			t.Errorf("%s: %v, want %v", labels, got, want)
		}
	}
	if _, err := parseSelector([]string{"=x"}); ExitCode(err) != ExitUsage {
		t.Errorf("=x: %v", err)
	}
}

// Documents print as one object or a List in JSON, --- separated YAML,
// and read back as the same documents.
func TestDocumentsRoundTrip(t *testing.T) {
	docs := []Document{
		{Kind: "CloudAccount", Name: "a", Metadata: &Metadata{ResourceVersion: "3"}, Spec: json.RawMessage(`{"regions":["r1"]}`), Status: map[string]any{"source": "api"}},
		{Kind: "Hook", Name: "h", Spec: json.RawMessage(`{"timeout":"2m"}`)},
	}
	var js, ys strings.Builder
	if err := printDocuments(&js, outJSON, docs, false); err != nil {
		t.Fatal(err)
	}
	if err := printDocuments(&ys, outYAML, docs, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `"kind": "List"`) || strings.Count(ys.String(), "\n---\n") != 1 {
		t.Fatalf("json:\n%s\nyaml:\n%s", js.String(), ys.String())
	}
	for name, text := range map[string]string{"json": js.String(), "yaml": ys.String()} {
		got, err := parseDocuments(name, []byte(text))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != 2 || got[0].Kind != client.KindCloudAccount || got[0].ResourceVersion != "3" || got[1].Name != "h" || got[1].ResourceVersion != "" {
			t.Fatalf("%s read back as %+v", name, got)
		}
		var spec map[string]any
		if err := json.Unmarshal(got[0].Spec, &spec); err != nil || spec["regions"].([]any)[0] != "r1" {
			t.Fatalf("%s spec %s", name, got[0].Spec)
		}
	}
	// An unquoted resourceVersion is read as written.
	got, err := parseDocuments("x", []byte("kind: Hook\nname: h\nmetadata: {resourceVersion: 12}\nspec: {script: s}\n---\n# only a comment\n"))
	if err != nil || len(got) != 1 || got[0].ResourceVersion != "12" {
		t.Fatalf("unquoted: %+v %v", got, err)
	}
}
