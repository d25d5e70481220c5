package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nodesmith/nodesmith/libs/restapi"
)

// Output formats of -o.
const (
	outTable = ""
	outWide  = "wide"
	outJSON  = "json"
	outYAML  = "yaml"
)

func checkOutput(o string) error {
	switch o {
	case outTable, outWide, outJSON, outYAML:
		return nil
	}
	return usagef(fmt.Errorf("-o %q: want wide, json or yaml", o))
}

// Document is one object as get -o json|yaml prints it and apply reads
// it: kind, name, metadata.resourceVersion (the ETag's revision), the spec
// in the REST API's PUT shape, and (printed, ignored by apply) the status:
// the API's full view. Write-only fields (provider parameters, hook
// scripts and environments, credentials) are never returned, so a spec
// printed by get lacks them.
type Document struct {
	Kind     string          `json:"kind"`
	Name     string          `json:"name"`
	Metadata *Metadata       `json:"metadata,omitempty"`
	Spec     json.RawMessage `json:"spec,omitempty"`
	Status   any             `json:"status,omitempty"`
}

// Metadata holds the resource version.
type Metadata struct {
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// list is how -o json prints several documents.
type list struct {
	Kind  string     `json:"kind"`
	Items []Document `json:"items"`
}

// printDocuments prints docs as JSON (one object, or a List) or YAML
// (documents separated by ---).
func printDocuments(w io.Writer, format string, docs []Document, single bool) error {
	if format == outJSON {
		var v any = list{Kind: "List", Items: docs}
		if single && len(docs) == 1 {
			v = docs[0]
		}
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	for i, d := range docs {
		b, err := documentYAML(d)
		if err != nil {
			return err
		}
		if i > 0 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// documentYAML renders d with its top-level keys in reading order (kind,
// name, metadata, spec, status) rather than sorted.
func documentYAML(d Document) ([]byte, error) {
	var out []byte
	for _, kv := range []struct {
		key string
		v   any
		set bool
	}{
		{"kind", d.Kind, true}, {"name", d.Name, true}, {"metadata", d.Metadata, d.Metadata != nil},
		{"spec", d.Spec, len(d.Spec) > 0}, {"status", d.Status, d.Status != nil},
	} {
		if !kv.set {
			continue
		}
		b, err := yaml.Marshal(map[string]any{kv.key: kv.v})
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return out, nil
}

func rawJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs and maps: cannot fail
	}
	return b
}

// groupSpec is the PUT body a group's view allows to rebuild: templates
// and hooks with a name become references to the catalog entry of that
// name (their write-only parts are not returned).
func groupSpec(g restapi.Group) json.RawMessage {
	spec := map[string]any{"minSize": g.MinSize, "maxSize": g.MaxSize, "targetSize": g.TargetSize}
	if g.AdoptExisting {
		spec["adoptExisting"] = true
	}
	if t := g.InstanceTemplate; t != nil {
		if t.Name != "" {
			spec["instanceTemplate"] = map[string]string{"name": t.Name}
		} else {
			spec["instanceTemplate"] = t
		}
	}
	if g.NodeTemplate != nil {
		spec["nodeTemplate"] = g.NodeTemplate
	}
	if g.AutoscalingOptions != nil {
		spec["autoscalingOptions"] = g.AutoscalingOptions
	}
	if g.Parallelism != nil {
		spec["parallelism"] = g.Parallelism
	}
	hooks := map[string]any{}
	for phase, h := range g.Hooks {
		if h.Name != "" {
			hooks[phase] = map[string]string{"name": h.Name}
		}
	}
	if len(hooks) > 0 {
		spec["hooks"] = hooks
	}
	return rawJSON(spec)
}

func templateSpec(t restapi.TemplateInfo) json.RawMessage {
	it := t.InstanceTemplate
	it.Name = ""
	return rawJSON(it)
}

func accountSpec(a restapi.Account) json.RawMessage {
	spec := map[string]any{}
	if a.Provider != "" {
		spec["provider"] = a.Provider
	}
	if len(a.Regions) > 0 {
		spec["regions"] = a.Regions
	}
	return rawJSON(spec)
}

func hookSpec(h restapi.HookInfo) json.RawMessage {
	spec := map[string]any{}
	if h.Timeout != "" {
		spec["timeout"] = h.Timeout
	}
	if h.OnFailure != "" {
		spec["onFailure"], _ = restapi.OnFailureOf(h.OnFailure)
	}
	return rawJSON(spec)
}

// Instance states, in lifecycle order.
var states = []string{"PENDING", "CREATING", "CREATED", "JOINED", "RUNNING", "PENDING_DELETION", "DELETING", "DELETED"}

// provisioning counts instances on their way to Running.
func provisioning(c map[string]int) int {
	return c["PENDING"] + c["CREATING"] + c["CREATED"] + c["JOINED"]
}

// deleting counts instances on their way out.
func deleting(c map[string]int) int { return c["PENDING_DELETION"] + c["DELETING"] }

// age renders how long ago an RFC 3339 time was, kubectl style.
func age(ts string, now time.Time) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if ts == "" || err != nil {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func joinOrDash(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}

// keysOf lists a map's keys sorted, as k=v.
func keyValues(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}
