package restapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"
)

// ConfigFile is lifecycle's configuration file (YAML, read into these JSON
// names): accounts and instance templates by name, and the node groups.
type ConfigFile struct {
	// Accounts name cloud accounts; their credentials are not here (they
	// are the cloud adapter's secrets).
	Accounts map[string]AccountSpec `json:"accounts,omitempty"`
	// InstanceTemplates describe how to create VMs, by name.
	InstanceTemplates map[string]InstanceTemplateSpec `json:"instanceTemplates,omitempty"`
	NodeGroups        []GroupSpec                     `json:"nodeGroups,omitempty"`
}

// OnFailure values of a beforeDelete hook (the one documented spelling;
// any case is accepted).
const (
	OnFailureContinue = "continue"
	OnFailureBlock    = "block"
)

// OnFailureOf returns the canonical spelling of a hook's onFailure and
// whether it is one ("" stays "": the default, continue). Any case is
// accepted, and the deprecated ON_FAILURE_CONTINUE and ON_FAILURE_BLOCK.
func OnFailureOf(s string) (canonical string, ok bool) {
	v := strings.TrimPrefix(strings.ToLower(s), "on_failure_")
	switch v {
	case "", OnFailureContinue, OnFailureBlock:
		return v, true
	}
	return "", false
}

// Duration is a validated duration field's value (0 for ""). Call it on a
// document Validate accepted.
func Duration(s string) time.Duration {
	d, _ := parseDuration(s)
	return d
}

func parseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	return time.ParseDuration(s)
}

// TaintEffects are Kubernetes' taint effects.
var TaintEffects = []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Where a document is written: some fields belong to one of them only.
const (
	// InFile is lifecycle's configuration file.
	InFile = true
	// InAPI is the REST API.
	InAPI = false
)

// Validate checks the file's shape: every account, template and group
// (paths from the file's root). References between them (a group's
// template, a template's account) and hook files are the loader's to
// resolve.
func (f *ConfigFile) Validate() FieldErrors {
	var errs FieldErrors
	for _, name := range sortedKeys(f.Accounts) {
		a := f.Accounts[name]
		if msg := contract.ValidName(name); msg != "" {
			errs.add("accounts."+name, "account name %s", msg)
		}
		errs = append(errs, prefix("accounts."+name, a.Validate())...)
		if a.Credentials != nil || a.ClearCredentials {
			errs.add("accounts."+name+".credentials", "credentials are not part of the configuration file: give them to the cloud adapter (secret files or a Secret)")
		}
	}
	for _, name := range sortedKeys(f.InstanceTemplates) {
		t := f.InstanceTemplates[name]
		p := "instanceTemplates." + name
		if msg := contract.ValidName(name); msg != "" {
			errs.add(p, "template name %s", msg)
		}
		if t.Name != "" && t.Name != name {
			errs.add(p+".name", "%q differs from the template's key %q", t.Name, name)
		}
		errs = append(errs, prefix(p, t.Validate())...)
	}
	seen := map[string]int{}
	for i := range f.NodeGroups {
		g := &f.NodeGroups[i]
		p := fmt.Sprintf("nodeGroups[%d]", i)
		if g.ID == "" {
			errs.add(p+".id", "required")
		} else if msg := contract.ValidGroupID(g.ID); msg != "" {
			errs.add(p+".id", "%s", msg)
		} else if j, dup := seen[g.ID]; dup {
			errs.add(p+".id", "duplicate id %q (also nodeGroups[%d])", g.ID, j)
		} else {
			seen[g.ID] = i
		}
		errs = append(errs, prefix(p, g.validate(InFile))...)
	}
	return errs
}

func prefix(p string, errs FieldErrors) FieldErrors {
	for i := range errs {
		errs[i].Field = join(p, errs[i].Field)
	}
	return errs
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Validate checks a group's shape for the REST API (a hook file is the
// configuration file's only). Paths are relative to the group.
func (g *GroupSpec) Validate() FieldErrors { return g.validate(InAPI) }

// ValidateIn is Validate for the configuration file (inFile) or the API.
func (g *GroupSpec) ValidateIn(inFile bool) FieldErrors { return g.validate(inFile) }

func (g *GroupSpec) validate(inFile bool) FieldErrors {
	var errs FieldErrors
	var minSize, maxSize int32
	if g.MinSize != nil {
		minSize = *g.MinSize
	}
	switch {
	case minSize < 0:
		errs.add("minSize", "must not be negative, got %d", minSize)
	case g.MaxSize == nil:
		errs.add("maxSize", "required")
	case *g.MaxSize < 0:
		errs.add("maxSize", "must not be negative, got %d", *g.MaxSize)
	case minSize > *g.MaxSize:
		errs.add("minSize", "must not exceed maxSize (%d), got %d", *g.MaxSize, minSize)
	default:
		maxSize = *g.MaxSize
		if t := g.TargetSize; t != nil && (*t < minSize || *t > maxSize) {
			errs.add("targetSize", "must be within [minSize, maxSize] = [%d, %d], got %d", minSize, maxSize, *t)
		}
	}
	if g.InstanceTemplate == nil {
		errs.add("instanceTemplate", "required")
	} else if !g.InstanceTemplate.ByName() {
		errs = append(errs, prefix("instanceTemplate", g.InstanceTemplate.validate(false))...)
	}
	if nt := g.NodeTemplate; nt != nil {
		for i, t := range nt.Taints {
			p := fmt.Sprintf("nodeTemplate.taints[%d]", i)
			if t.Key == "" {
				errs.add(p+".key", "required")
			}
			if !slices.Contains(TaintEffects, t.Effect) {
				errs.add(p+".effect", "must be one of %v, got %q", TaintEffects, t.Effect)
			}
		}
	}
	if o := g.AutoscalingOptions; o != nil {
		errs = append(errs, prefix("autoscalingOptions", o.validate())...)
	}
	if h := g.Hooks; h != nil {
		if h.AfterCreated != nil {
			errs = append(errs, prefix("hooks.afterCreated", h.AfterCreated.validate(inFile, false, true))...)
		}
		if h.BeforeDelete != nil {
			errs = append(errs, prefix("hooks.beforeDelete", h.BeforeDelete.validate(inFile, true, true))...)
		}
	}
	if p := g.Parallelism; p != nil {
		if p.Create < 0 {
			errs.add("parallelism.create", "must not be negative, got %d", p.Create)
		}
		if p.Delete < 0 {
			errs.add("parallelism.delete", "must not be negative, got %d", p.Delete)
		}
	}
	if g.AdoptExisting && (g.NodeTemplate == nil || len(g.NodeTemplate.Labels) == 0) {
		errs.add("adoptExisting", "needs at least one nodeTemplate label to recognise the group's Nodes")
	}
	return errs
}

func (o *AutoscalingOptions) validate() FieldErrors {
	var errs FieldErrors
	for _, th := range []struct {
		name string
		v    *float64
	}{{"scaleDownUtilizationThreshold", o.ScaleDownUtilizationThreshold}, {"scaleDownGpuUtilizationThreshold", o.ScaleDownGPUUtilizationThreshold}} {
		if th.v != nil && (*th.v < 0 || *th.v > 1) {
			errs.add(th.name, "must be within [0, 1], got %v", *th.v)
		}
	}
	for _, d := range []struct {
		name, v string
	}{{"scaleDownUnneededTime", o.ScaleDownUnneededTime}, {"scaleDownUnreadyTime", o.ScaleDownUnreadyTime}, {"maxNodeProvisionTime", o.MaxNodeProvisionTime}} {
		errs = append(errs, durationErrors(d.name, d.v)...)
	}
	if o.MaxNodeProvisionTime != "" && Duration(o.MaxNodeProvisionTime) == 0 && len(errs) == 0 {
		errs.add("maxNodeProvisionTime", "must be positive (CA deletes nodes not ready within it)")
	}
	return errs
}

func durationErrors(field, s string) FieldErrors {
	d, err := parseDuration(s)
	switch {
	case err != nil:
		return FieldErrors{{Field: field, Message: fmt.Sprintf("invalid duration %q (use Go syntax, e.g. 10m)", s)}}
	case d < 0:
		return FieldErrors{{Field: field, Message: "must not be negative, got " + s}}
	}
	return nil
}

// ByName says whether the template only names a template of the catalog
// (or of the file's instanceTemplates).
func (t *InstanceTemplateSpec) ByName() bool {
	return t.Name != "" && t.Provider == "" && t.Account == "" && t.Region == "" && t.Zone == "" &&
		t.InstanceType == "" && t.Arch == "" && t.OS == "" && t.HourlyPrice == 0 && t.SSHPort == 0 &&
		t.CapacityType == "" && t.MaxPrice == "" && len(t.Offerings) == 0 && t.OfferingStrategy == "" &&
		len(t.Parameters) == 0 && t.ProviderIDTemplate == "" && len(t.HookEnv) == 0 && len(t.SecretParameters) == 0
}

// Validate checks a named template's shape (PUT /templates/{name}, the
// file's instanceTemplates): the account is required.
func (t *InstanceTemplateSpec) Validate() FieldErrors { return t.validate(true) }

func (t *InstanceTemplateSpec) validate(needAccount bool) FieldErrors {
	var errs FieldErrors
	if needAccount && t.Account == "" {
		errs.add("account", "required")
	}
	if t.HourlyPrice < 0 {
		errs.add("hourlyPrice", "must not be negative, got %v", t.HourlyPrice)
	}
	if t.SSHPort > 65535 {
		errs.add("sshPort", "must be a TCP port, got %d", t.SSHPort)
	}
	for _, p := range []struct {
		name string
		raw  json.RawMessage
	}{{"parameters", t.Parameters}, {"secretParameters", t.SecretParameters}} {
		raw := bytes.TrimSpace(p.raw)
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
			errs.add(p.name, "must be a JSON object")
		}
	}
	for _, k := range sortedKeys(t.HookEnv) {
		if !envName.MatchString(k) {
			errs.add("hookEnv", "%q is not a valid environment variable name", k)
		}
	}
	return errs
}

// Validate checks a catalog hook's shape (PUT /hooks/{name}): it has a
// script, and serves either phase.
func (h *HookSpec) Validate() FieldErrors { return h.validate(InAPI, true, false) }

// validate: a group's hook may name a catalog hook only (byName).
func (h *HookSpec) validate(inFile, beforeDelete, byName bool) FieldErrors {
	var errs FieldErrors
	hasScript := strings.TrimSpace(h.Script) != ""
	switch {
	case h.File != "" && !inFile:
		errs.add("file", "only the configuration file names a script file: send the script")
	case h.File != "" && h.Script != "":
		errs.add("", "set either file or script, not both")
	case h.File != "" || hasScript:
	case inFile:
		errs.add("", "set file or script")
	case byName && h.Name != "" && h.Timeout == "" && len(h.Env) == 0 && h.OnFailure == "":
		// The catalog's hook of that name.
	case byName:
		errs.add("script", "is required (or give only the name of a catalog hook)")
	default:
		errs.add("script", "is required")
	}
	errs = append(errs, durationErrors("timeout", h.Timeout)...)
	if _, ok := OnFailureOf(h.OnFailure); !ok {
		errs.add("onFailure", "must be continue or block, got %q", h.OnFailure)
	} else if h.OnFailure != "" && !beforeDelete {
		errs.add("onFailure", "only applies to beforeDelete")
	}
	for _, k := range sortedKeys(h.Env) {
		if !envName.MatchString(k) {
			errs.add("env", "%q is not a valid environment variable name", k)
		}
	}
	return errs
}

// Validate checks an account's shape.
func (a *AccountSpec) Validate() FieldErrors {
	var errs FieldErrors
	seen := map[string]bool{}
	for i, r := range a.Regions {
		field := fmt.Sprintf("regions[%d]", i)
		switch {
		case strings.TrimSpace(r) == "":
			errs.add(field, "must not be empty")
		case seen[r]:
			errs.add(field, "duplicate region %q", r)
		}
		seen[r] = true
	}
	if c := a.Credentials; c != nil {
		if a.ClearCredentials {
			errs.add("clearCredentials", "cannot be combined with credentials")
		} else if strings.TrimSpace(c.SecretID) == "" || strings.TrimSpace(c.SecretKey) == "" {
			errs.add("credentials", "secretId and secretKey are required")
		}
	}
	return errs
}
