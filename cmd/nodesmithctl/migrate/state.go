package migrate

import (
	"fmt"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The prototype saves its state in the ConfigMap nodegroup-status
// (kube-system; its --nodegroup-status-cm): each data entry holds the
// status of the node groups as YAML or JSON, a list of groups (or an
// object with nodeGroups) each with an id and its instances:
//
//	nodeGroups:
//	  - id: worker-group
//	    instances:
//	      - instanceID: ins-abc123      # the CVM id
//	        nodeName: 10.0.1.7          # the Node's name
//	        providerID: externalgrpc://tencentcloud/acct/ap-beijing/ins-abc123
//	        ip: 10.0.1.7
//	        status: Running             # Pending, Creating, ..., Deleted
//
// Seed 000 documents the ConfigMap but not its fields, so keys are matched
// case-insensitively with the usual variants (id/instanceId/InstanceID,
// name/nodeName, ip/privateIP/internalIP, status/state/stage); instances
// may also be an object keyed by instance id. Only Running instances are
// adopted: the others are listed as skipped.

// StatusInstance is one of the prototype's instances.
type StatusInstance struct {
	CloudID    string
	NodeName   string
	ProviderID string
	IP         string
	Status     string
}

// StatusGroup is one of the prototype's node groups.
type StatusGroup struct {
	ID        string
	Instances []StatusInstance
}

// ParseStatus reads the prototype's nodegroup-status: the ConfigMap (YAML
// or JSON, as `kubectl get cm nodegroup-status -o yaml` prints it) or the
// content of its data entry.
func ParseStatus(data []byte) ([]StatusGroup, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("reading the status: %w", err)
	}
	if m, ok := doc.(map[string]any); ok && strings.EqualFold(str(get(m, "kind")), "ConfigMap") {
		d, _ := get(m, "data").(map[string]any)
		if len(d) == 0 {
			return nil, fmt.Errorf("the ConfigMap has no data")
		}
		var out []StatusGroup
		for _, k := range sortedKeys(d) {
			s, ok := d[k].(string)
			if !ok {
				return nil, fmt.Errorf("data.%s: not a string", k)
			}
			gs, err := ParseStatus([]byte(s))
			if err != nil {
				return nil, fmt.Errorf("data.%s: %w", k, err)
			}
			out = append(out, gs...)
		}
		return out, nil
	}
	var groups []any
	switch v := doc.(type) {
	case []any:
		groups = v
	case map[string]any:
		if ng := get(v, "nodeGroups", "nodegroups", "groups"); ng != nil {
			switch x := ng.(type) {
			case []any:
				groups = x
			case map[string]any:
				groups = keyed(x, "id")
			}
		} else {
			groups = keyed(v, "id")
		}
	default:
		return nil, fmt.Errorf("the status is neither a list of node groups nor an object")
	}
	var out []StatusGroup
	for i, g := range groups {
		gm, ok := g.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("node group %d: not an object", i)
		}
		sg := StatusGroup{ID: str(get(gm, "id", "nodeGroupId", "nodeGroupID", "name"))}
		if sg.ID == "" {
			return nil, fmt.Errorf("node group %d: no id", i)
		}
		var insts []any
		switch x := get(gm, "instances", "nodes").(type) {
		case []any:
			insts = x
		case map[string]any:
			insts = keyed(x, "instanceID")
		}
		for j, in := range insts {
			im, ok := in.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("node group %s, instance %d: not an object", sg.ID, j)
			}
			sg.Instances = append(sg.Instances, StatusInstance{
				CloudID:    str(get(im, "instanceID", "instanceId", "cloudID", "cloudId", "id")),
				NodeName:   str(get(im, "nodeName", "name", "hostname")),
				ProviderID: str(get(im, "providerID", "providerId")),
				IP:         str(get(im, "ip", "privateIP", "privateIp", "internalIP", "internalIp")),
				Status:     str(get(im, "status", "state", "stage")),
			})
		}
		out = append(out, sg)
	}
	return out, nil
}

// keyed turns {k: {...}} into [{key: k, ...}] (the object keys as ids).
func keyed(m map[string]any, key string) []any {
	var out []any
	for _, k := range sortedKeys(m) {
		v, ok := m[k].(map[string]any)
		if !ok {
			out = append(out, m[k])
			continue
		}
		if get(v, key) == nil {
			cp := map[string]any{key: k}
			for kk, vv := range v {
				cp[kk] = vv
			}
			v = cp
		}
		out = append(out, v)
	}
	return out
}

// get returns the first of keys present in m, case-insensitively.
func get(m map[string]any, keys ...string) any {
	for _, k := range keys {
		if v, ok := m[k]; ok {
			return v
		}
	}
	for mk, v := range m {
		for _, k := range keys {
			if strings.EqualFold(mk, k) {
				return v
			}
		}
	}
	return nil
}

func str(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	default:
		return fmt.Sprint(x)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// AdoptVM is one VM to hand to nodesmith (the adopt route's body).
type AdoptVM struct {
	CloudID    string `json:"cloudID"`
	NodeName   string `json:"nodeName"`
	ProviderID string `json:"providerID"`
	PrivateIP  string `json:"privateIP,omitempty"`
}

// Skipped is an instance of the status that will not be adopted, and why.
type Skipped struct {
	CloudID, NodeName, Status, Reason string
}

// GroupPlan is what `migrate state` does for one group.
type GroupPlan struct {
	Group   string
	Adopt   []AdoptVM
	Skipped []Skipped
}

// Plan lists, per group, the prototype's Running instances to adopt. A
// missing providerID is rendered from the converted template of the group
// (templates and groups from ConvertConfig; both may be nil, then an
// instance without providerID is skipped).
func Plan(groups []StatusGroup, templates map[string]TemplateInfo, groupTemplates map[string]string) []GroupPlan {
	var out []GroupPlan
	for _, g := range groups {
		p := GroupPlan{Group: g.ID}
		for _, in := range g.Instances {
			skip := func(reason string) {
				p.Skipped = append(p.Skipped, Skipped{CloudID: in.CloudID, NodeName: in.NodeName, Status: in.Status, Reason: reason})
			}
			switch {
			case !strings.EqualFold(in.Status, "Running"):
				skip("not Running: only Running instances are adopted")
				continue
			case in.CloudID == "":
				skip("no instance id")
				continue
			case in.NodeName == "":
				skip("no node name")
				continue
			}
			pid := in.ProviderID
			if pid == "" {
				t, ok := templates[groupTemplates[g.ID]]
				if !ok {
					skip("no providerID, and no converted template of group " + g.ID + " to render it (pass --config prototype.yaml)")
					continue
				}
				pid = RenderProviderID(t, g.ID, in.CloudID)
			}
			p.Adopt = append(p.Adopt, AdoptVM{CloudID: in.CloudID, NodeName: in.NodeName, ProviderID: pid, PrivateIP: in.IP})
		}
		out = append(out, p)
	}
	return out
}

// RenderProviderID renders a converted template's providerID for a VM,
// as nodesmith would.
func RenderProviderID(t TemplateInfo, group, cloudID string) string {
	tmpl := t.ProviderIDTemplate
	if tmpl == "" {
		tmpl = "externalgrpc://{{.Provider}}/{{.Account}}/{{.Region}}/{{.CloudID}}"
	}
	return strings.NewReplacer(
		"{{.Provider}}", t.Provider, "{{.Account}}", t.Account, "{{.Region}}", t.Region,
		"{{.Zone}}", t.Zone, "{{.CloudID}}", cloudID, "{{.Group}}", group,
	).Replace(tmpl)
}
