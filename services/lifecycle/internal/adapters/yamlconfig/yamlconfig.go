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
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// File is the schema of the configuration file.
type File struct {
	// Accounts name cloud accounts; credentials are not here (they are the
	// cloud adapter's secrets).
	Accounts map[string]Account `yaml:"accounts"`
	// InstanceTemplates describe how to create VMs, by name.
	InstanceTemplates map[string]Template `yaml:"instanceTemplates"`
	NodeGroups        []Group             `yaml:"nodeGroups"`
}

// Account is a cloud account.
type Account struct {
	// Provider defaults to cloudspec.DefaultProvider ("tencentcloud").
	Provider string `yaml:"provider"`
	// Region is the default region of templates on this account.
	Region string `yaml:"region"`
}

// Template is an instance template.
type Template struct {
	// Provider defaults to the account's provider.
	Provider string `yaml:"provider"`
	Account  string `yaml:"account"`
	// Region defaults to the account's region.
	Region       string  `yaml:"region"`
	Zone         string  `yaml:"zone"`
	InstanceType string  `yaml:"instanceType"`
	Arch         string  `yaml:"arch"`
	OS           string  `yaml:"os"`
	HourlyPrice  float64 `yaml:"hourlyPrice"`
	// ProviderIDTemplate is a Go template over .Provider, .Account,
	// .Region, .Zone, .CloudID, .InstanceID and .Group.
	ProviderIDTemplate string            `yaml:"providerIDTemplate"`
	SSHPort            uint32            `yaml:"sshPort"`
	HookEnv            map[string]string `yaml:"hookEnv"`
	// Parameters is the provider's create request (for Tencent Cloud and
	// Alibaba Cloud, the RunInstances parameters), passed through as JSON
	// after libs/cloudspec checked it.
	Parameters map[string]any `yaml:"parameters"`
	// SecretParameters are more top-level create parameters (same shape as
	// Parameters) that are secret, e.g. a login password: lifecycle seals
	// each value (libs/sealed) before storing or sending it, and only the
	// cloud adapter opens them, merging them into Parameters for the cloud
	// call. Every hookEnv and hook env value is sealed the same way.
	SecretParameters map[string]any `yaml:"secretParameters"`
}

// Group is a node group.
type Group struct {
	ID      string `yaml:"id"`
	MinSize *int   `yaml:"minSize"`
	MaxSize *int   `yaml:"maxSize"`
	// TargetSize is the initial target when the group is first created;
	// it defaults to minSize and is never re-applied afterwards.
	TargetSize         *int               `yaml:"targetSize"`
	InstanceTemplate   string             `yaml:"instanceTemplate"`
	NodeTemplate       NodeTemplate       `yaml:"nodeTemplate"`
	AutoscalingOptions AutoscalingOptions `yaml:"autoscalingOptions"`
	Hooks              Hooks              `yaml:"hooks"`
	Parallelism        Parallelism        `yaml:"parallelism"`
	AdoptExisting      bool               `yaml:"adoptExisting"`
}

// NodeTemplate is the Node a group's VMs become.
type NodeTemplate struct {
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
	Taints      []Taint           `yaml:"taints"`
	Capacity    map[string]string `yaml:"capacity"`
	Allocatable map[string]string `yaml:"allocatable"`
}

// Taint is a node taint.
type Taint struct {
	Key    string `yaml:"key"`
	Value  string `yaml:"value"`
	Effect string `yaml:"effect"`
}

// AutoscalingOptions override CA's defaults for the group.
type AutoscalingOptions struct {
	ScaleDownUtilizationThreshold    *float64      `yaml:"scaleDownUtilizationThreshold"`
	ScaleDownGpuUtilizationThreshold *float64      `yaml:"scaleDownGpuUtilizationThreshold"`
	ScaleDownUnneededTime            time.Duration `yaml:"scaleDownUnneededTime"`
	ScaleDownUnreadyTime             time.Duration `yaml:"scaleDownUnreadyTime"`
	MaxNodeProvisionTime             time.Duration `yaml:"maxNodeProvisionTime"`
	ZeroOrMaxNodeScaling             *bool         `yaml:"zeroOrMaxNodeScaling"`
	IgnoreDaemonSetsUtilization      *bool         `yaml:"ignoreDaemonSetsUtilization"`
}

// Hooks of a group.
type Hooks struct {
	AfterCreated *Hook `yaml:"afterCreated"`
	BeforeDelete *Hook `yaml:"beforeDelete"`
}

// Hook is a script given inline or as a file (relative paths are relative
// to the configuration file's directory).
type Hook struct {
	File   string `yaml:"file"`
	Script string `yaml:"script"`
	// Timeout of one run; zero means the hook runner's default.
	Timeout time.Duration `yaml:"timeout"`
	// OnFailure (beforeDelete only): continue (default) or block.
	OnFailure string            `yaml:"onFailure"`
	Env       map[string]string `yaml:"env"`
}

// Parallelism overrides the service's per-group defaults.
type Parallelism struct {
	Create int `yaml:"create"`
	Delete int `yaml:"delete"`
}

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
	c.known(&root, reflect.TypeOf(File{}), "")
	// Decode strictly; unknown fields were already reported with their
	// paths by known, type errors are mapped to paths by line. The decoder
	// keeps going after a type error, so the semantic checks below still
	// see everything else.
	var f File
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(&f); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, &Error{File: name, Problems: append(c.problems, yamlProblem(err, c.lines))}
		}
		for _, msg := range te.Errors {
			if strings.Contains(msg, " not found in type ") {
				continue
			}
			pr := yamlProblem(errors.New(msg), c.lines)
			c.add(pr.Path, pr.Line, "%s", pr.Msg)
		}
	}
	cfg := c.resolve(&f, baseDir)
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

var durationType = reflect.TypeOf(time.Duration(0))

// known walks the document against the schema type, reporting unknown
// fields with their paths and recording where every value is.
func (c *checker) known(n *yaml.Node, t reflect.Type, path string) {
	if c.nodeLines == nil {
		c.nodeLines = map[string]int{}
	}
	for n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if _, seen := c.nodeLines[path]; !seen {
		c.nodeLines[path] = n.Line
	}
	if n.Kind == yaml.ScalarNode {
		c.lines[n.Line] = path
	}
	if t == durationType {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return // the decoder reports the type error
		}
		fields := map[string]reflect.StructField{}
		for i := range t.NumField() {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if tag != "" && tag != "-" {
				fields[tag] = f
			}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			f, ok := fields[k.Value]
			if !ok {
				c.add(p, k.Line, "unknown field %q%s", k.Value, suggest(k.Value, fields))
				continue
			}
			c.lines[k.Line] = p
			c.nodeLines[p] = k.Line
			c.known(v, f.Type, p)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			c.lines[k.Line] = p
			c.nodeLines[p] = k.Line
			c.known(v, t.Elem(), p)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for i, item := range n.Content {
			c.known(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

// suggest proposes the field a typo most likely meant.
func suggest(got string, fields map[string]reflect.StructField) string {
	best, bestD := "", 3
	for name := range fields {
		if d := distance(strings.ToLower(got), strings.ToLower(name)); d < bestD {
			best, bestD = name, d
		}
	}
	if best == "" {
		names := make([]string, 0, len(fields))
		for n := range fields {
			names = append(names, n)
		}
		sort.Strings(names)
		return "; known fields: " + strings.Join(names, ", ")
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// distance is the Levenshtein distance.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func (c *checker) resolve(f *File, baseDir string) *Config {
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
		p := "instanceTemplates." + name
		dt := domain.InstanceTemplate{
			Name: name, Provider: t.Provider, Account: t.Account, Region: t.Region, Zone: t.Zone,
			InstanceType: t.InstanceType, Arch: t.Arch, OS: t.OS, HourlyPrice: t.HourlyPrice,
			ProviderIDTemplate: t.ProviderIDTemplate, SSHPort: t.SSHPort, HookEnv: t.HookEnv,
		}
		if t.Account == "" {
			c.add(p+".account", 0, "required")
		} else if acct, ok := f.Accounts[t.Account]; !ok {
			c.add(p+".account", 0, "unknown account %q (defined: %s)", t.Account, list(sortedKeys(f.Accounts)))
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
			if dt.Region == "" {
				dt.Region = acct.Region
			}
		}
		if dt.Provider == "" {
			dt.Provider = cloudspec.DefaultProvider
		}
		if t.Parameters != nil {
			b, err := json.Marshal(t.Parameters)
			if err != nil {
				c.add(p+".parameters", 0, "cannot be expressed as JSON: %v", err)
			}
			dt.ParametersJSON = string(b)
		}
		c.cloudParameters(&dt, p, sortedKeys(t.SecretParameters))
		for _, k := range sortedKeys(t.SecretParameters) {
			if _, dup := t.Parameters[k]; dup {
				c.add(p+".secretParameters."+k, 0, "is also in parameters: a parameter is either secret or not")
				continue
			}
			b, err := json.Marshal(t.SecretParameters[k])
			if err != nil {
				// Never echo the value: it is secret.
				c.add(p+".secretParameters."+k, 0, "cannot be expressed as JSON")
				continue
			}
			if dt.SecretParameters == nil {
				dt.SecretParameters = map[string]string{}
			}
			// Plaintext here; lifecycle seals it before storing it.
			dt.SecretParameters[k] = string(b)
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
		templates[name] = dt
	}
	for _, name := range sortedKeys(f.Accounts) {
		acct := f.Accounts[name]
		da := domain.Account{Name: name, Provider: acct.Provider}
		if da.Provider == "" {
			da.Provider = cloudspec.DefaultProvider
		}
		if acct.Region != "" {
			da.Regions = []string{acct.Region}
		}
		cfg.Catalog = append(cfg.Catalog, domain.CatalogEntry{Account: &da, Source: domain.SourceConfig})
	}
	for _, name := range sortedKeys(templates) {
		dt := templates[name]
		cfg.Catalog = append(cfg.Catalog, domain.CatalogEntry{Template: &dt, Source: domain.SourceConfig})
	}
	seen := map[string]int{}
	for i, g := range f.NodeGroups {
		p := fmt.Sprintf("nodeGroups[%d]", i)
		if j, dup := seen[g.ID]; dup && g.ID != "" {
			c.add(p+".id", 0, "duplicate id %q (also nodeGroups[%d])", g.ID, j)
		}
		seen[g.ID] = i
		dg, ok := c.group(g, p, templates, baseDir)
		if ok {
			cfg.Groups = append(cfg.Groups, dg)
		}
	}
	return cfg
}

func (c *checker) group(g Group, p string, templates map[string]domain.InstanceTemplate, baseDir string) (domain.NodeGroup, bool) {
	before := len(c.problems)
	dg := domain.NodeGroup{
		ID:            g.ID,
		Source:        domain.SourceConfig,
		AdoptExisting: g.AdoptExisting,
		Parallelism:   domain.Parallelism{Create: g.Parallelism.Create, Delete: g.Parallelism.Delete},
		NodeTemplate: domain.NodeTemplate{
			Labels: g.NodeTemplate.Labels, Annotations: g.NodeTemplate.Annotations,
			Capacity: g.NodeTemplate.Capacity, Allocatable: g.NodeTemplate.Allocatable,
		},
		Autoscaling: domain.AutoscalingOptions{
			ScaleDownUtilizationThreshold:    g.AutoscalingOptions.ScaleDownUtilizationThreshold,
			ScaleDownGPUUtilizationThreshold: g.AutoscalingOptions.ScaleDownGpuUtilizationThreshold,
			ScaleDownUnneeded:                g.AutoscalingOptions.ScaleDownUnneededTime,
			ScaleDownUnready:                 g.AutoscalingOptions.ScaleDownUnreadyTime,
			MaxNodeProvision:                 g.AutoscalingOptions.MaxNodeProvisionTime,
			ZeroOrMaxNodeScaling:             g.AutoscalingOptions.ZeroOrMaxNodeScaling,
			IgnoreDaemonSetsUtilization:      g.AutoscalingOptions.IgnoreDaemonSetsUtilization,
		},
	}
	for _, t := range g.NodeTemplate.Taints {
		dg.NodeTemplate.Taints = append(dg.NodeTemplate.Taints, domain.Taint(t))
	}
	if g.MaxSize == nil {
		c.add(p+".maxSize", 0, "required")
	} else {
		dg.MaxSize = *g.MaxSize
	}
	if g.MinSize != nil {
		dg.MinSize = *g.MinSize
	}
	dg.TargetSize = dg.MinSize
	if g.TargetSize != nil {
		dg.TargetSize = *g.TargetSize
	}
	for _, th := range []*float64{g.AutoscalingOptions.ScaleDownUtilizationThreshold, g.AutoscalingOptions.ScaleDownGpuUtilizationThreshold} {
		if th != nil && (*th < 0 || *th > 1) {
			c.add(p+".autoscalingOptions", 0, "utilization thresholds must be within [0, 1], got %v", *th)
		}
	}
	switch t, ok := templates[g.InstanceTemplate]; {
	case g.InstanceTemplate == "":
		c.add(p+".instanceTemplate", 0, "required")
	case !ok:
		c.add(p+".instanceTemplate", 0, "unknown instance template %q (defined: %s)", g.InstanceTemplate, list(sortedKeys(templates)))
	default:
		dg.Template = t
	}
	dg.Hooks.AfterCreated = c.hook(g.Hooks.AfterCreated, p+".hooks.afterCreated", g.ID+"-after-created", baseDir, false)
	dg.Hooks.BeforeDelete = c.hook(g.Hooks.BeforeDelete, p+".hooks.beforeDelete", g.ID+"-before-delete", baseDir, true)
	for _, e := range dg.Validate() {
		if strings.HasPrefix(e.Field, "instanceTemplate") {
			continue // reported once, under instanceTemplates
		}
		if (e.Field == "maxSize" || e.Field == "targetSize" || e.Field == "minSize") && g.MaxSize == nil {
			continue // maxSize missing: already reported
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

func (c *checker) hook(h *Hook, p, defaultName, baseDir string, beforeDelete bool) *domain.HookSpec {
	if h == nil {
		return nil
	}
	spec := &domain.HookSpec{Name: defaultName, Script: h.Script, Timeout: h.Timeout, Env: h.Env}
	switch {
	case h.File != "" && h.Script != "":
		c.add(p, 0, "set either file or script, not both")
	case h.File == "" && h.Script == "":
		c.add(p, 0, "set file or script")
	case h.File != "":
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
		spec.Name = filepath.Base(h.File)
	}
	if len(spec.Script) > MaxHookScript {
		field := p + ".script"
		if h.File != "" {
			field = p + ".file"
		}
		c.add(field, 0, "hook script is larger than %d KiB", MaxHookScript>>10)
	}
	switch strings.ToLower(h.OnFailure) {
	case "":
		spec.OnFailure = domain.OnFailureDefault
	case "continue":
		spec.OnFailure = domain.OnFailureContinue
	case "block":
		spec.OnFailure = domain.OnFailureBlock
	default:
		c.add(p+".onFailure", 0, "must be continue or block, got %q", h.OnFailure)
	}
	if h.OnFailure != "" && !beforeDelete {
		c.add(p+".onFailure", 0, "only applies to beforeDelete")
	}
	return spec
}

// cloudParameters applies the cloud's template rules (libs/cloudspec) to a
// template of a known provider: its zone and instance type and those of
// its create parameters fill each other and must agree, and the parameters
// must be a valid create request (with the secret parameters' names).
// Unknown providers' parameters pass through.
func (c *checker) cloudParameters(dt *domain.InstanceTemplate, p string, secretParameters []string) {
	cloud, ok := cloudspec.Lookup(dt.Provider)
	if !ok || c.hasProblem(p+".parameters") {
		return
	}
	t := cloudspec.Template{Zone: dt.Zone, InstanceType: dt.InstanceType, Parameters: dt.ParametersJSON}
	errs := cloud.Reconcile(&t)
	if errs == nil {
		dt.Zone, dt.InstanceType, dt.ParametersJSON = t.Zone, t.InstanceType, t.Parameters
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
