// Package migrate converts the prototype's (cluster-autoscaler-grpc-cloud-
// provider's) configuration and saved state to nodesmith's: a pure
// conversion of nodegroup-config.yaml into nodesmith's configuration file
// (ConvertConfig), and the prototype's nodegroup-status ConfigMap into the
// VMs to adopt per group (ParseStatus, Plan). It imports nothing of the
// services: the output is nodesmith's documented file format, checked by
// `lifecycle --check-config`.
package migrate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nodesmith/nodesmith/libs/restapi"
)

// Warning is something of the prototype's file that the conversion could
// not carry over (or carried over differently), with its line.
type Warning struct {
	Line    int
	Path    string
	Message string
}

func (w Warning) String() string {
	if w.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", w.Line, w.Path, w.Message)
	}
	return fmt.Sprintf("%s: %s", w.Path, w.Message)
}

// Credentials are one account's keys, to be stored as a Secret (never in
// the converted file).
type Credentials struct {
	Account   string
	SecretID  string
	SecretKey string
	Token     string
}

// Options tune the conversion.
type Options struct {
	// HooksDir is where the prototype's hook scripts (after_created_hook.sh,
	// before_delete_hook.sh, its --hooks-path) will be, relative to the
	// converted file; empty means "hooks".
	HooksDir string
	// AdoptExisting sets adoptExisting on every group (off by default: the
	// explicit `migrate state` is the documented path).
	AdoptExisting bool
}

// Result is a conversion's output.
type Result struct {
	// YAML is nodesmith's configuration file.
	YAML []byte
	// Credentials are the accounts' keys found in the file, to store as a
	// Secret for the cloud adapter; they are not in YAML.
	Credentials []Credentials
	Warnings    []Warning
	// Templates maps each converted template to the providerID template
	// its VMs' Nodes carry, for `migrate state`.
	Templates map[string]TemplateInfo
	// Groups maps each group to its template's name.
	Groups map[string]string
}

// TemplateInfo is what `migrate state` needs of a converted template.
type TemplateInfo struct {
	Provider, Account, Region, Zone string
	// ProviderIDTemplate is nodesmith's Go template (empty: the default,
	// externalgrpc://{{.Provider}}/{{.Account}}/{{.Region}}/{{.CloudID}}).
	ProviderIDTemplate string
}

// Hook script file names of the prototype (its --hooks-path).
const (
	AfterCreatedHook = "after_created_hook.sh"
	BeforeDeleteHook = "before_delete_hook.sh"
)

// The output is libs/restapi's ConfigFile: lifecycle's loader reads the
// file into the same types (and the REST API its bodies), so the
// conversion cannot write a field nodesmith does not know.
type (
	outFile        = restapi.ConfigFile
	outAccount     = restapi.AccountSpec
	outTemplate    = restapi.InstanceTemplateSpec
	outGroup       = restapi.GroupSpec
	outNodeTmpl    = restapi.NodeTemplate
	outTaint       = restapi.Taint
	outAutoscaling = restapi.AutoscalingOptions
	outHooks       = restapi.HooksSpec
	outHook        = restapi.HookSpec
)

// converter walks the prototype's YAML nodes, so every warning has a line.
type converter struct {
	opts     Options
	warnings []Warning
	creds    []Credentials
}

func (c *converter) warn(n *yaml.Node, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	c.warnings = append(c.warnings, Warning{Line: line, Path: path, Message: fmt.Sprintf(format, args...)})
}

// pairs returns a mapping node's keys and values in order; anything else
// is warned about and yields nothing.
func (c *converter) pairs(n *yaml.Node, path string) [][2]*yaml.Node {
	if n == nil || n.Kind == 0 {
		return nil
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		if n.Tag != "!!null" {
			c.warn(n, path, "expected a mapping; not carried over")
		}
		return nil
	}
	var out [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		out = append(out, [2]*yaml.Node{n.Content[i], n.Content[i+1]})
	}
	return out
}

func (c *converter) str(n *yaml.Node, path string) string {
	if n.Kind != yaml.ScalarNode {
		c.warn(n, path, "expected a string; not carried over")
		return ""
	}
	return n.Value
}

func (c *converter) integer(n *yaml.Node, path string) *int32 {
	var v int32
	if n.Kind != yaml.ScalarNode || n.Decode(&v) != nil {
		c.warn(n, path, "expected an integer; not carried over")
		return nil
	}
	return &v
}

func (c *converter) float(n *yaml.Node, path string) *float64 {
	var v float64
	if n.Kind != yaml.ScalarNode || n.Decode(&v) != nil {
		c.warn(n, path, "expected a number; not carried over")
		return nil
	}
	return &v
}

func (c *converter) duration(n *yaml.Node, path string) string {
	s := c.str(n, path)
	if s == "" {
		return ""
	}
	if _, err := time.ParseDuration(s); err != nil {
		c.warn(n, path, "%q is not a duration (like 40m); not carried over", s)
		return ""
	}
	return s
}

func (c *converter) stringMap(n *yaml.Node, path string) map[string]string {
	var out map[string]string
	for _, kv := range c.pairs(n, path) {
		if kv[1].Kind != yaml.ScalarNode {
			c.warn(kv[1], path+"."+kv[0].Value, "expected a string; not carried over")
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[kv[0].Value] = kv[1].Value
	}
	return out
}

// ConvertConfig converts the prototype's nodegroup-config.yaml.
func ConvertConfig(data []byte, opts Options) (*Result, error) {
	if opts.HooksDir == "" {
		opts.HooksDir = "hooks"
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("reading the prototype's configuration: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, fmt.Errorf("the prototype's configuration is empty")
	}
	c := &converter{opts: opts}
	out := outFile{Accounts: map[string]outAccount{}, InstanceTemplates: map[string]outTemplate{}}
	res := &Result{Templates: map[string]TemplateInfo{}, Groups: map[string]string{}}
	var groupsNode *yaml.Node
	accountProviders := map[string]string{}
	var paramNode *yaml.Node
	for _, kv := range c.pairs(doc.Content[0], "") {
		switch kv[0].Value {
		case "cloudProviderOption":
			for _, p := range c.pairs(kv[1], "cloudProviderOption") {
				path := "cloudProviderOption." + p[0].Value
				switch p[0].Value {
				case "instanceParameter":
					paramNode = p[1]
				case "tencentcloud":
					for _, a := range c.pairs(p[1], path) {
						c.account(a[0], a[1], path+"."+a[0].Value)
						accountProviders[a[0].Value] = "tencentcloud"
					}
				default:
					c.warn(p[0], path, "provider %q is not supported by the conversion (tencentcloud is); its accounts are not carried over", p[0].Value)
				}
			}
		case "nodeGroups":
			groupsNode = kv[1]
		default:
			c.warn(kv[0], kv[0].Value, "unknown top-level field; not carried over")
		}
	}
	for name, prov := range accountProviders {
		out.Accounts[name] = outAccount{Provider: prov}
	}
	for _, t := range c.pairs(paramNode, "cloudProviderOption.instanceParameter") {
		name := t[0].Value
		tmpl, info, ok := c.template(name, t[1], "cloudProviderOption.instanceParameter."+name, accountProviders)
		if !ok {
			continue
		}
		out.InstanceTemplates[name] = tmpl
		res.Templates[name] = info
		acct := out.Accounts[tmpl.Account]
		if len(acct.Regions) == 0 && info.Region != "" {
			acct.Regions = []string{info.Region}
			out.Accounts[tmpl.Account] = acct
		}
	}
	if groupsNode != nil {
		if groupsNode.Kind != yaml.SequenceNode {
			c.warn(groupsNode, "nodeGroups", "expected a list; no group carried over")
		} else {
			for i, g := range groupsNode.Content {
				og, ok := c.group(g, fmt.Sprintf("nodeGroups[%d]", i), out.InstanceTemplates)
				if ok {
					out.NodeGroups = append(out.NodeGroups, og)
					res.Groups[og.ID] = og.InstanceTemplate.Name
				}
			}
		}
	}
	var buf bytes.Buffer
	buf.WriteString("# nodesmith configuration converted from the prototype's nodegroup-config.yaml\n" +
		"# by `nodesmithctl migrate config`. Cloud account keys are not in this file: store them\n" +
		"# as the cloud adapter's credentials (see docs/migration.md). Check it with\n" +
		"# `lifecycle --check-config --config-file FILE`.\n")
	outDoc, err := yamlOf(&out)
	if err != nil {
		return nil, err
	}
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(outDoc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	res.YAML = buf.Bytes()
	res.Credentials = c.creds
	sort.SliceStable(c.warnings, func(i, j int) bool { return c.warnings[i].Line < c.warnings[j].Line })
	res.Warnings = c.warnings
	return res, nil
}

// account collects an account's keys (for the Secret, never the output).
func (c *converter) account(key, n *yaml.Node, path string) {
	cr := Credentials{Account: key.Value}
	for _, kv := range c.pairs(n, path) {
		switch kv[0].Value {
		case "secretId":
			cr.SecretID = c.str(kv[1], path+".secretId")
		case "secretKey":
			cr.SecretKey = c.str(kv[1], path+".secretKey")
		case "token":
			cr.Token = c.str(kv[1], path+".token")
		default:
			c.warn(kv[0], path+"."+kv[0].Value, "unknown account field; not carried over")
		}
	}
	if cr.SecretID != "" || cr.SecretKey != "" {
		c.warn(key, path, "the account's keys are not written into the converted file: store them as the cloud adapter's credentials (secret files or a Secret)")
		c.creds = append(c.creds, cr)
	}
}

// protoProviderID is the prototype's documented providerID template:
// externalgrpc://<provider>/<account>/<region>/{{InstanceID}}.
var protoProviderID = regexp.MustCompile(`^externalgrpc://([^/]+)/([^/]+)/([^/]+)/\{\{\s*InstanceID\s*\}\}$`)

// protoVar is one {{Name}} of the prototype's providerID template.
var protoVar = regexp.MustCompile(`\{\{\s*\.?([A-Za-z]+)\s*\}\}`)

// ourVars maps the prototype's providerID variables to nodesmith's.
var ourVars = map[string]string{
	"InstanceID": "{{.CloudID}}", "InstanceId": "{{.CloudID}}", "CloudID": "{{.CloudID}}",
	"Region": "{{.Region}}", "Zone": "{{.Zone}}", "Account": "{{.Account}}", "Provider": "{{.Provider}}",
	"NodeGroup": "{{.Group}}", "Group": "{{.Group}}",
}

// zoneRegion turns a Tencent zone (ap-beijing-5) into its region.
var zoneRegion = regexp.MustCompile(`^([a-z]+-[a-z]+(?:-[a-z]+)?)-\d+$`)

func (c *converter) template(name string, n *yaml.Node, path string, accounts map[string]string) (outTemplate, TemplateInfo, bool) {
	t, info, ok := c.templateFields(name, n, path, accounts)
	if !ok {
		return t.outTemplate(), info, false
	}
	out := t.outTemplate()
	for what, m := range map[string]map[string]any{"parameter": t.Parameters, "secret parameters": t.SecretParameters} {
		if m == nil {
			continue
		}
		b, err := json.Marshal(m)
		if err != nil {
			c.warn(n, path+"."+what, "cannot be written as JSON: %v; the template is not carried over", err)
			return out, TemplateInfo{}, false
		}
		if what == "parameter" {
			out.Parameters = b
		} else {
			out.SecretParameters = b
		}
	}
	return out, info, true
}

// protoTemplate is a template being converted (its parameters as a map).
type protoTemplate struct {
	Provider, Account, Region, Zone, InstanceType, ProviderIDTemplate string
	Parameters, SecretParameters                                      map[string]any
}

func (t protoTemplate) outTemplate() outTemplate {
	return outTemplate{
		InstanceTemplate:   restapi.InstanceTemplate{Provider: t.Provider, Account: t.Account, Region: t.Region, Zone: t.Zone, InstanceType: t.InstanceType},
		ProviderIDTemplate: t.ProviderIDTemplate,
	}
}

func (c *converter) templateFields(name string, n *yaml.Node, path string, accounts map[string]string) (protoTemplate, TemplateInfo, bool) {
	var t protoTemplate
	var pidNode, paramsNode *yaml.Node
	var pid string
	for _, kv := range c.pairs(n, path) {
		switch kv[0].Value {
		case "providerIdTemplate", "providerIDTemplate":
			pidNode, pid = kv[1], c.str(kv[1], path+"."+kv[0].Value)
		case "parameter":
			paramsNode = kv[1]
		default:
			c.warn(kv[0], path+"."+kv[0].Value, "unknown instance parameter field; not carried over")
		}
	}
	if paramsNode != nil {
		var params map[string]any
		if err := paramsNode.Decode(&params); err != nil {
			c.warn(paramsNode, path+".parameter", "not a mapping of RunInstances parameters: %v; the template is not carried over", err)
			return t, TemplateInfo{}, false
		}
		t.Parameters = params
	}
	if p, _ := t.Parameters["Placement"].(map[string]any); p != nil {
		t.Zone, _ = p["Zone"].(string)
	}
	t.InstanceType, _ = t.Parameters["InstanceType"].(string)
	// Secret parameters: the login settings (a password or key ids).
	if ls, ok := t.Parameters["LoginSettings"]; ok {
		t.SecretParameters = map[string]any{"LoginSettings": ls}
		delete(t.Parameters, "LoginSettings")
		c.warn(keyNode(paramsNode, "LoginSettings"), path+".parameter.LoginSettings", "moved to secretParameters (sealed by lifecycle); the converted file still holds it: keep it in a Secret")
	}
	for _, k := range []string{"MinCount", "MaxCount", "InstanceCount", "ClientToken", "DryRun"} {
		if _, ok := t.Parameters[k]; ok {
			delete(t.Parameters, k)
			c.warn(keyNode(paramsNode, k), path+".parameter."+k, "set by nodesmith for each create call; not carried over")
		}
	}
	if m := protoProviderID.FindStringSubmatch(pid); m != nil {
		t.Provider, t.Account, t.Region = m[1], m[2], m[3]
		// The default template renders the same providerID.
	} else if pid != "" {
		converted := protoVar.ReplaceAllStringFunc(pid, func(v string) string {
			name := protoVar.FindStringSubmatch(v)[1]
			if ours, ok := ourVars[name]; ok {
				return ours
			}
			c.warn(pidNode, path+".providerIdTemplate", "variable {{%s}} has no nodesmith equivalent; left as is (the file will not pass the check)", name)
			return v
		})
		if !strings.Contains(converted, "{{.CloudID}}") {
			c.warn(pidNode, path+".providerIdTemplate", "names no instance id ({{InstanceID}}): Nodes cannot be mapped to VMs")
		}
		t.ProviderIDTemplate = converted
	}
	if t.Region == "" {
		if m := zoneRegion.FindStringSubmatch(t.Zone); m != nil {
			t.Region = m[1]
		}
	}
	if t.Account == "" {
		if len(accounts) == 1 {
			for a := range accounts {
				t.Account = a
			}
			c.warn(pidNode, path, "providerIdTemplate names no account; using the only account %q", t.Account)
		} else {
			c.warn(n, path, "cannot tell the template's account (its providerIdTemplate is not externalgrpc://<provider>/<account>/<region>/{{InstanceID}}); not carried over")
			return t, TemplateInfo{}, false
		}
	}
	if prov, ok := accounts[t.Account]; !ok {
		c.warn(pidNode, path, "account %q is not under cloudProviderOption.tencentcloud; declared without credentials", t.Account)
		accounts[t.Account] = "tencentcloud"
	} else if t.Provider != "" && t.Provider != prov {
		c.warn(pidNode, path+".providerIdTemplate", "names provider %q, the account is %q's", t.Provider, prov)
	}
	if t.Provider == "tencentcloud" {
		t.Provider = "" // the account's
	}
	if t.Region == "" {
		c.warn(n, path, "no region (from providerIdTemplate or parameter.Placement.Zone): set instanceTemplates.%s.region", name)
	}
	prov := accounts[t.Account]
	return t, TemplateInfo{Provider: prov, Account: t.Account, Region: t.Region, Zone: t.Zone, ProviderIDTemplate: t.ProviderIDTemplate}, true
}

func (c *converter) group(n *yaml.Node, path string, templates map[string]outTemplate) (outGroup, bool) {
	var g outGroup
	var targetKey *yaml.Node
	var tmpl string
	g.AdoptExisting = c.opts.AdoptExisting
	for _, kv := range c.pairs(n, path) {
		p := path + "." + kv[0].Value
		switch kv[0].Value {
		case "id":
			g.ID = c.str(kv[1], p)
		case "minSize":
			g.MinSize = c.integer(kv[1], p)
		case "maxSize":
			g.MaxSize = c.integer(kv[1], p)
		case "targetSize":
			g.TargetSize, targetKey = c.integer(kv[1], p), kv[0]
		case "instanceParameter":
			tmpl = c.str(kv[1], p)
		case "autoscalingOptions":
			g.AutoscalingOptions = c.autoscaling(kv[1], p)
		case "nodeTemplate":
			g.NodeTemplate = c.nodeTemplate(kv[1], p)
		case "instances":
			c.warn(kv[0], p, "the prototype's instances are state, not configuration: adopt them with `nodesmithctl migrate state`")
		default:
			c.warn(kv[0], p, "unknown node group field; not carried over")
		}
	}
	if g.ID == "" {
		c.warn(n, path, "no id; the group is not carried over")
		return g, false
	}
	if _, ok := templates[tmpl]; !ok {
		c.warn(n, path, "instanceParameter %q is not a converted template; the group is not carried over", tmpl)
		return g, false
	}
	g.InstanceTemplate = &outTemplate{InstanceTemplate: restapi.InstanceTemplate{Name: tmpl}}
	if g.MaxSize == nil {
		c.warn(n, path, "no maxSize; the group is not carried over")
		return g, false
	}
	if g.TargetSize != nil {
		c.warn(targetKey, path+".targetSize", "applies only when nodesmith first creates the group; `migrate state` raises the target by one per adopted VM, so it is left out")
		g.TargetSize = nil
	}
	dir := strings.TrimSuffix(c.opts.HooksDir, "/")
	g.Hooks = &outHooks{
		AfterCreated: &outHook{File: dir + "/" + AfterCreatedHook},
		BeforeDelete: &outHook{File: dir + "/" + BeforeDeleteHook},
	}
	return g, true
}

func (c *converter) autoscaling(n *yaml.Node, path string) *outAutoscaling {
	var a outAutoscaling
	set := false
	for _, kv := range c.pairs(n, path) {
		p := path + "." + kv[0].Value
		set = true
		switch kv[0].Value {
		case "scaleDownUtilizationThreshold":
			a.ScaleDownUtilizationThreshold = c.float(kv[1], p)
		case "scaleDownGpuUtilizationThreshold":
			a.ScaleDownGPUUtilizationThreshold = c.float(kv[1], p)
		case "scaleDownUnneededTime":
			a.ScaleDownUnneededTime = c.duration(kv[1], p)
		case "scaleDownUnreadyTime":
			a.ScaleDownUnreadyTime = c.duration(kv[1], p)
		case "maxNodeProvisionTime":
			a.MaxNodeProvisionTime = c.duration(kv[1], p)
		default:
			c.warn(kv[0], p, "unknown autoscaling option; not carried over")
		}
	}
	if !set {
		return nil
	}
	return &a
}

func (c *converter) nodeTemplate(n *yaml.Node, path string) *outNodeTmpl {
	var t outNodeTmpl
	for _, kv := range c.pairs(n, path) {
		p := path + "." + kv[0].Value
		switch kv[0].Value {
		case "labels":
			t.Labels = c.stringMap(kv[1], p)
		case "annotations":
			t.Annotations = c.stringMap(kv[1], p)
		case "capacity":
			t.Capacity = c.stringMap(kv[1], p)
		case "allocatable":
			t.Allocatable = c.stringMap(kv[1], p)
		case "taints":
			if kv[1].Kind != yaml.SequenceNode {
				c.warn(kv[1], p, "expected a list; not carried over")
				continue
			}
			for i, tn := range kv[1].Content {
				var tt outTaint
				tp := p + "[" + strconv.Itoa(i) + "]"
				for _, f := range c.pairs(tn, tp) {
					switch f[0].Value {
					case "key":
						tt.Key = c.str(f[1], tp+".key")
					case "value":
						tt.Value = c.str(f[1], tp+".value")
					case "effect":
						tt.Effect = c.str(f[1], tp+".effect")
					default:
						c.warn(f[0], tp+"."+f[0].Value, "unknown taint field; not carried over")
					}
				}
				t.Taints = append(t.Taints, tt)
			}
		default:
			c.warn(kv[0], p, "unknown node template field; not carried over")
		}
	}
	return &t
}

// keyNode returns the key node of key in mapping n (n itself if absent).
func keyNode(n *yaml.Node, key string) *yaml.Node {
	if n != nil && n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return n.Content[i]
			}
		}
	}
	return n
}

// yamlOf renders the file as YAML nodes in the types' field order (JSON
// is YAML: the nodes of its JSON keep the order), plain style, and a group's
// template by name as just the name.
func yamlOf(f *outFile) (*yaml.Node, error) {
	b, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	plain(&doc)
	if root := doc.Content[0]; root.Kind == yaml.MappingNode {
		if groups := keyValue(root, "nodeGroups"); groups != nil {
			for _, g := range groups.Content {
				it := keyValue(g, "instanceTemplate")
				if it != nil && it.Kind == yaml.MappingNode && len(it.Content) == 2 && it.Content[0].Value == "name" {
					*it = *it.Content[1]
				}
			}
		}
	}
	return &doc, nil
}

// plain drops the JSON quoting and flow style (the encoder quotes what
// needs it).
func plain(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		plain(c)
	}
}

func keyValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
