// Package yamlconfig reads the declarative configuration file: accounts,
// instance templates and node groups. It resolves references (templates,
// accounts, hook files) into self-contained domain.NodeGroups and reports
// every problem at once, each with the file, the field path and the line.
package yamlconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/libs/restapi"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// The file's schema is libs/restapi's ConfigFile: the REST API's write
// documents (GroupSpec, InstanceTemplateSpec, HookSpec, AccountSpec), the
// same JSON names and the same shape rules (restapi Validate). The YAML is
// read into a JSON tree (go.yaml.in/yaml/v3 nodes, which keep each value's
// line) and decoded by restapi.DecodeTree; this package adds what needs
// the whole file or the disk: references between entries, hook files and
// the clouds' parameter rules.

// Problem is one thing wrong with the file.
type Problem struct {
	// Path is the field, e.g. "nodeGroups[1].minSize" ("" for the file).
	Path string
	// Line is the 1-based line, 0 if unknown.
	Line int
	Msg  string
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Path != "" {
		b.WriteString(p.Path + ": ")
	}
	b.WriteString(p.Msg)
	if p.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", p.Line)
	}
	return b.String()
}

// Error lists every problem found in a configuration file.
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "configuration file %s is invalid (%d problems):", e.File, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.String())
	}
	return b.String()
}

// Config is a loaded, validated configuration.
type Config struct {
	// Groups are ready to store (Source config, templates and hooks
	// resolved, TargetSize = the initial target).
	Groups []domain.NodeGroup
	// Catalog holds the file's accounts and instance templates (resolved
	// like the groups' snapshots), for lifecycle's catalog bucket.
	Catalog []domain.CatalogEntry
	// Warnings are accepted oddities worth logging.
	Warnings []string
}

// Load reads and validates the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading configuration file: %w", err)
	}
	return Parse(path, data, filepath.Dir(path))
}

// Parse validates data; name labels errors (usually the path) and baseDir
// resolves relative hook files ("" = the working directory).
func Parse(name string, data []byte, baseDir string) (*Config, error) {
	c := &checker{lines: map[int]string{}}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return &Config{Warnings: []string{name + " is empty: no node groups are defined by the file"}}, nil
		}
		pr := yamlProblem(err, c.lines)
		if pr.Line == 0 {
			// The parser does not always say where: an unexpected end of
			// the stream is at the end of the file.
			pr.Msg = "malformed YAML: " + pr.Msg
			if strings.Contains(pr.Msg, "end of stream") {
				pr.Line = 1 + bytes.Count(bytes.TrimRight(data, "\n"), []byte("\n"))
			}
		}
		return nil, &Error{File: name, Problems: []Problem{pr}}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &Error{File: name, Problems: []Problem{{Msg: "the file must hold exactly one YAML document"}}}
	}
	c.nodeLines, c.open = map[string]int{}, map[*yaml.Node]bool{}
	tree, err := c.tree(&root, "")
	if err != nil {
		pr := yamlProblem(err, c.lines)
		if pr.Line == 0 {
			pr.Line = 1
		}
		return nil, &Error{File: name, Problems: []Problem{pr}}
	}
	if tree == nil {
		return &Config{Warnings: []string{name + " is empty: no node groups are defined by the file"}}, nil
	}
	var f restapi.ConfigFile
	warnings, err := restapi.DecodeTree(tree, &f, restapi.DecodeOptions{ScalarStrings: true})
	var fe restapi.FieldErrors
	if err != nil && !errors.As(err, &fe) {
		return nil, &Error{File: name, Problems: []Problem{{Msg: err.Error()}}}
	}
	// Every problem at once: the decoder drops the values in error and
	// decodes the rest, so the checks below still see everything else.
	for _, e := range append(fe, f.Validate()...) {
		c.add(e.Field, 0, "%s", e.Message)
	}
	cfg := c.resolve(&f, baseDir)
	for _, w := range warnings {
		msg := fmt.Sprintf("%s: %s: %s", name, w.Field, w.Message)
		if line := c.lineOf(w.Field); line > 0 {
			msg += fmt.Sprintf(" (line %d)", line)
		}
		cfg.Warnings = append(cfg.Warnings, msg)
	}
	if len(c.problems) > 0 {
		sort.SliceStable(c.problems, func(i, j int) bool { return c.problems[i].Line < c.problems[j].Line })
		return nil, &Error{File: name, Problems: c.problems}
	}
	return cfg, nil
}

// parent returns the enclosing path: "a.b[1].c" -> "a.b[1]" -> "a.b" -> "a".
func parent(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

type checker struct {
	problems []Problem
	// lines maps a line to the path of the value on it, to locate the
	// decoder's type errors.
	lines map[int]string
	// open are the aliased nodes being expanded (a cycle is an error);
	// values counts the values expanded.
	open   map[*yaml.Node]bool
	values int
	// nodes maps paths to their lines, to locate validation problems.
	nodeLines map[string]int
}

// add records a problem, once per path: a field that is already wrong
// (e.g. of the wrong type) would otherwise be reported again by the checks
// that see its zero value.
func (c *checker) add(path string, line int, format string, args ...any) {
	if path != "" && c.hasProblem(path) {
		return
	}
	// Missing fields have no line: point at the nearest enclosing one.
	for p := path; line == 0 && p != ""; p = parent(p) {
		line = c.nodeLines[p]
	}
	if line == 0 {
		line = c.nodeLines[""]
	}
	c.problems = append(c.problems, Problem{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)})
}

var lineRE = regexp.MustCompile(`(?s)^(?:yaml: )?line (\d+): (.*)$`)

// yamlProblem turns a decoder message into a Problem with a path when the
// line is known.
func yamlProblem(err error, lines map[int]string) Problem {
	msg := err.Error()
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return Problem{Path: lines[line], Line: line, Msg: m[2]}
	}
	return Problem{Msg: strings.TrimPrefix(msg, "yaml: ")}
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// lineOf is the line of path, or of its nearest enclosing value.
func (c *checker) lineOf(path string) int {
	for p := path; p != ""; p = parent(p) {
		if l := c.nodeLines[p]; l > 0 {
			return l
		}
	}
	return 0
}

// maxValues bounds the values of the file, aliases expanded.
const maxValues = 1 << 20

// tree turns the YAML document into a JSON tree (what encoding/json
// decodes into any, numbers as json.Number), recording every value's line
// by its field path.
func (c *checker) tree(n *yaml.Node, path string) (any, error) {
	for n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil, nil
		}
		n = n.Content[0]
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		if c.open[n.Alias] {
			return nil, fmt.Errorf("line %d: the alias *%s refers to itself", n.Line, n.Value)
		}
		c.open[n.Alias] = true
		defer delete(c.open, n.Alias)
		n = n.Alias
	}
	// Aliases may repeat a node many times (a "billion laughs").
	if c.values++; c.values > maxValues {
		return nil, fmt.Errorf("the file expands to more than %d values (aliases)", maxValues)
	}
	if _, seen := c.nodeLines[path]; !seen {
		c.nodeLines[path] = n.Line
	}
	switch n.Kind {
	case yaml.MappingNode:
		obj := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			c.nodeLines[p] = k.Line
			val, err := c.tree(v, p)
			if err != nil {
				return nil, err
			}
			obj[k.Value] = val
		}
		return obj, nil
	case yaml.SequenceNode:
		list := make([]any, len(n.Content))
		for i, item := range n.Content {
			val, err := c.tree(item, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			list[i] = val
		}
		return list, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err == nil {
				return b, nil
			}
		case "!!int":
			var i int64
			if err := n.Decode(&i); err == nil {
				return json.Number(strconv.FormatInt(i, 10)), nil
			}
		case "!!float":
			var f float64
			if err := n.Decode(&f); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
			}
		}
		return n.Value, nil
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node", n.Line)
}

func (c *checker) resolve(f *restapi.ConfigFile, baseDir string) *Config {
	cfg := &Config{}
	for _, name := range sortedKeys(f.Accounts) {
		p := "accounts." + name
		if msg := domain.ValidName(name); msg != "" {
			c.add(p, 0, "account name %s", msg)
		}
	}
	templates := map[string]domain.InstanceTemplate{}
	for _, name := range sortedKeys(f.InstanceTemplates) {
		t := f.InstanceTemplates[name]
		templates[name] = c.template(name, &t, "instanceTemplates."+name, f.Accounts)
	}
	for _, name := range sortedKeys(f.Accounts) {
		acct := f.Accounts[name]
		da := domain.Account{Name: name, Provider: acct.Provider, Regions: acct.Regions}
		if da.Provider == "" {
			da.Provider = cloudspec.DefaultProvider
		}
		cfg.Catalog = append(cfg.Catalog, domain.CatalogEntry{Account: &da, Source: domain.SourceConfig})
	}
	for _, name := range sortedKeys(templates) {
		dt := templates[name]
		cfg.Catalog = append(cfg.Catalog, domain.CatalogEntry{Template: &dt, Source: domain.SourceConfig})
	}
	for i, g := range f.NodeGroups {
		dg, ok := c.group(g, fmt.Sprintf("nodeGroups[%d]", i), templates, f.Accounts, baseDir)
		if ok {
			cfg.Groups = append(cfg.Groups, dg)
		}
	}
	return cfg
}

// template resolves a template (named, or inline in a group) against the
// file's accounts and the cloud's rules.
func (c *checker) template(name string, t *restapi.InstanceTemplateSpec, p string, accounts map[string]restapi.AccountSpec) domain.InstanceTemplate {
	dt := domain.InstanceTemplate{
		Name: name, Provider: t.Provider, Account: t.Account, Region: t.Region, Zone: t.Zone,
		InstanceType: t.InstanceType, Arch: t.Arch, OS: t.OS, HourlyPrice: t.HourlyPrice,
		ProviderIDTemplate: t.ProviderIDTemplate, SSHPort: t.SSHPort, HookEnv: t.HookEnv,
		CapacityType: t.CapacityType, MaxPrice: t.MaxPrice, OfferingStrategy: t.OfferingStrategy,
	}
	for _, o := range t.Offerings {
		dt.Offerings = append(dt.Offerings, cloudspec.Offering(o))
	}
	if t.Account == "" {
		c.add(p+".account", 0, "required")
	} else if acct, ok := accounts[t.Account]; !ok {
		c.add(p+".account", 0, "unknown account %q (defined: %s)", t.Account, list(sortedKeys(accounts)))
	} else {
		acctProvider := acct.Provider
		if acctProvider == "" {
			acctProvider = cloudspec.DefaultProvider
		}
		if dt.Provider == "" {
			dt.Provider = acctProvider
		} else if dt.Provider != acctProvider {
			c.add(p+".provider", 0, "%q differs from the provider %q of account %q", dt.Provider, acctProvider, t.Account)
		}
		if dt.Region == "" && len(acct.Regions) > 0 {
			dt.Region = acct.Regions[0]
		}
	}
	if dt.Provider == "" {
		dt.Provider = cloudspec.DefaultProvider
	}
	if raw := bytes.TrimSpace(t.Parameters); len(raw) > 0 && string(raw) != "null" {
		var compact bytes.Buffer
		if err := json.Compact(&compact, raw); err == nil {
			dt.ParametersJSON = compact.String()
		}
	}
	var params, secrets map[string]json.RawMessage
	_ = json.Unmarshal(t.Parameters, &params)
	_ = json.Unmarshal(t.SecretParameters, &secrets)
	c.cloudParameters(&dt, p, sortedKeys(secrets))
	for _, k := range sortedKeys(secrets) {
		if _, dup := params[k]; dup {
			c.add(p+".secretParameters."+k, 0, "is also in parameters: a parameter is either secret or not")
			continue
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, secrets[k]); err != nil {
			// Never echo the value: it is secret.
			c.add(p+".secretParameters."+k, 0, "cannot be expressed as JSON")
			continue
		}
		if dt.SecretParameters == nil {
			dt.SecretParameters = map[string]string{}
		}
		// Plaintext here; lifecycle seals it before storing it.
		dt.SecretParameters[k] = compact.String()
	}
	for _, e := range dt.Validate() {
		if e.Field == "name" {
			c.add(p, 0, "template name %s", e.Problem)
			continue
		}
		if e.Field == "account" && t.Account == "" {
			continue // already reported
		}
		c.add(p+"."+e.Field, 0, "%s", e.Problem)
	}
	return dt
}

func (c *checker) group(g restapi.GroupSpec, p string, templates map[string]domain.InstanceTemplate, accounts map[string]restapi.AccountSpec, baseDir string) (domain.NodeGroup, bool) {
	before := len(c.problems)
	dg := domain.NodeGroup{
		ID:            g.ID,
		Source:        domain.SourceConfig,
		AdoptExisting: g.AdoptExisting,
	}
	if par := g.Parallelism; par != nil {
		dg.Parallelism = domain.Parallelism{Create: int(par.Create), Delete: int(par.Delete)}
	}
	if nt := g.NodeTemplate; nt != nil {
		dg.NodeTemplate = domain.NodeTemplate{Labels: nt.Labels, Annotations: nt.Annotations, Capacity: nt.Capacity, Allocatable: nt.Allocatable}
		for _, t := range nt.Taints {
			dg.NodeTemplate.Taints = append(dg.NodeTemplate.Taints, domain.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
		}
	}
	if o := g.AutoscalingOptions; o != nil {
		dg.Autoscaling = domain.AutoscalingOptions{
			ScaleDownUtilizationThreshold:    o.ScaleDownUtilizationThreshold,
			ScaleDownGPUUtilizationThreshold: o.ScaleDownGPUUtilizationThreshold,
			ScaleDownUnneeded:                restapi.Duration(o.ScaleDownUnneededTime),
			ScaleDownUnready:                 restapi.Duration(o.ScaleDownUnreadyTime),
			MaxNodeProvision:                 restapi.Duration(o.MaxNodeProvisionTime),
			ZeroOrMaxNodeScaling:             o.ZeroOrMaxNodeScaling,
			IgnoreDaemonSetsUtilization:      o.IgnoreDaemonSetsUtilization,
		}
	}
	if g.MaxSize != nil {
		dg.MaxSize = int(*g.MaxSize)
	}
	if g.MinSize != nil {
		dg.MinSize = int(*g.MinSize)
	}
	dg.TargetSize = dg.MinSize
	if g.TargetSize != nil {
		dg.TargetSize = int(*g.TargetSize)
	}
	switch it := g.InstanceTemplate; {
	case it == nil:
		// reported by Validate
	case it.ByName():
		if t, ok := templates[it.Name]; ok {
			dg.Template = t
		} else {
			c.add(p+".instanceTemplate", 0, "unknown instance template %q (defined: %s)", it.Name, list(sortedKeys(templates)))
		}
	default:
		// Defined in the group: named after it unless it says otherwise.
		name := it.Name
		if name == "" {
			name = g.ID
		}
		dg.Template = c.template(name, it, p+".instanceTemplate", accounts)
	}
	if h := g.Hooks; h != nil {
		dg.Hooks.AfterCreated = c.hook(h.AfterCreated, p+".hooks.afterCreated", g.ID+"-after-created", baseDir)
		dg.Hooks.BeforeDelete = c.hook(h.BeforeDelete, p+".hooks.beforeDelete", g.ID+"-before-delete", baseDir)
	}
	for _, e := range dg.Validate() {
		if strings.HasPrefix(e.Field, "instanceTemplate") {
			continue // reported once, by the template's checks
		}
		if (e.Field == "maxSize" || e.Field == "targetSize" || e.Field == "minSize") && c.hasProblem(p+".maxSize") {
			continue // maxSize missing or wrong: already reported
		}
		if strings.HasPrefix(e.Field, "hooks.") && !strings.Contains(strings.TrimPrefix(e.Field, "hooks."), ".") && c.hasProblem(p+"."+e.Field) {
			continue
		}
		c.add(p+"."+e.Field, 0, "%s", e.Problem)
	}
	return dg, len(c.problems) == before
}

// hasProblem reports whether path or a field below it has a problem.
func (c *checker) hasProblem(path string) bool {
	for _, p := range c.problems {
		if p.Path == path || strings.HasPrefix(p.Path, path+".") || strings.HasPrefix(p.Path, path+"[") {
			return true
		}
	}
	return false
}

// MaxHookScript bounds a hook script: it travels in every hook command and
// is stored in the group's record.
const MaxHookScript = 256 << 10

// readHookFile reads a hook script file: a regular file (symbolic links,
// as in ConfigMap volumes, are followed) of at most MaxHookScript bytes.
func readHookFile(path string) ([]byte, error) {
	// Checked before opening: opening a FIFO or a device may block.
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, MaxHookScript+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxHookScript {
		return nil, fmt.Errorf("%s is larger than %d KiB", path, MaxHookScript>>10)
	}
	return b, nil
}

// hook reads a hook's file; restapi's Validate checked its shape.
func (c *checker) hook(h *restapi.HookSpec, p, defaultName, baseDir string) *domain.HookSpec {
	if h == nil {
		return nil
	}
	spec := &domain.HookSpec{Name: defaultName, Script: h.Script, Timeout: restapi.Duration(h.Timeout), Env: h.Env}
	if h.Name != "" {
		spec.Name = h.Name
	}
	if h.File != "" && h.Script == "" {
		path := h.File
		if !filepath.IsAbs(path) {
			path = filepath.Join(baseDir, path)
		}
		b, err := readHookFile(path)
		switch {
		case err != nil:
			c.add(p+".file", 0, "cannot read hook script: %v", err)
		case len(bytes.TrimSpace(b)) == 0:
			c.add(p+".file", 0, "hook script %s is empty", path)
		}
		spec.Script = string(b)
		if h.Name == "" {
			spec.Name = filepath.Base(h.File)
		}
	}
	if len(spec.Script) > MaxHookScript {
		field := p + ".script"
		if h.File != "" {
			field = p + ".file"
		}
		c.add(field, 0, "hook script is larger than %d KiB", MaxHookScript>>10)
	}
	switch v, _ := restapi.OnFailureOf(h.OnFailure); v {
	case restapi.OnFailureContinue:
		spec.OnFailure = domain.OnFailureContinue
	case restapi.OnFailureBlock:
		spec.OnFailure = domain.OnFailureBlock
	default:
		spec.OnFailure = domain.OnFailureDefault
	}
	return spec
}

// cloudParameters applies the cloud's template rules (libs/cloudspec) to a
// template of a known provider: its zone and instance type and those of
// its create parameters fill each other and must agree, and the parameters
// must be a valid create request (with the secret parameters' names). The
// capacity type and max price are written into the parameters, and the
// offerings checked (the first one's zone and instance type become the
// template's). Unknown providers' parameters pass through.
func (c *checker) cloudParameters(dt *domain.InstanceTemplate, p string, secretParameters []string) {
	cloud, ok := cloudspec.Lookup(dt.Provider)
	if !ok || c.hasProblem(p+".parameters") {
		return
	}
	t := cloudspec.Template{
		Zone: dt.Zone, InstanceType: dt.InstanceType, Parameters: dt.ParametersJSON,
		CapacityType: dt.CapacityType, MaxPrice: dt.MaxPrice, Offerings: dt.Offerings, OfferingStrategy: dt.OfferingStrategy,
	}
	errs := cloud.Reconcile(&t)
	if errs == nil {
		dt.Zone, dt.InstanceType, dt.ParametersJSON = t.Zone, t.InstanceType, t.Parameters
		dt.CapacityType, dt.MaxPrice = t.CapacityType, t.MaxPrice
		errs = cloud.ValidateParameters(t.Parameters, secretParameters...)
	}
	for _, e := range errs {
		c.add(p+"."+e.Path, 0, "%s", e.Msg)
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

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
