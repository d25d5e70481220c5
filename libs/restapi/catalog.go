package restapi

// Views of the catalog: instance templates, cloud accounts and hooks (from
// the catalog bucket, plus named inline definitions of groups), with the
// groups using them.

// TemplateInfo is a named instance template and the groups using it. Its
// provider parameters (which may hold login passwords), providerID
// template and hook environment are never returned.
type TemplateInfo struct {
	InstanceTemplate
	// HasParameters says whether provider create parameters are set.
	HasParameters bool `json:"hasParameters"`
	// HookEnv and SecretParameters name the template's hook environment
	// variables and secret parameters; each value is only "(sealed)".
	HookEnv          map[string]string `json:"hookEnv,omitempty"`
	SecretParameters map[string]string `json:"secretParameters,omitempty"`
	Groups           []string          `json:"groups"`
	// Divergent: some group holds another version under this name (a
	// change not yet applied everywhere, or a file group's own template).
	Divergent bool `json:"divergent"`
	// Source is "config" (the configuration file owns it), "api", or
	// "group" for a template defined inline in groups only.
	Source string `json:"source"`
}

// TemplateList is every named template.
type TemplateList struct {
	Items []TemplateInfo `json:"items"`
}

// Account is a cloud account. Its credentials are never returned: only
// whether the catalog holds them and where they come from.
type Account struct {
	Name        string             `json:"name"`
	Provider    string             `json:"provider,omitempty"`
	Regions     []string           `json:"regions"`
	Credentials AccountCredentials `json:"credentials"`
	Templates   []string           `json:"templates"`
	Groups      []string           `json:"groups"`
	// Source is "config", "api", or "group" for an account only groups'
	// templates name.
	Source string `json:"source"`
}

// AccountCredentials says where an account's credentials come from.
type AccountCredentials struct {
	// Stored: the catalog holds them, sealed under the key KeyID; the
	// cloud adapter opens them with the same key.
	Stored bool   `json:"stored"`
	KeyID  string `json:"keyId,omitempty"`
	// Source is "catalog" (stored) or "cloud-adapter" (its credentials
	// files or environment, which this API cannot see).
	Source string `json:"source"`
}

// AccountList is every referenced account.
type AccountList struct {
	Items []Account `json:"items"`
}

// HookInfo is a named hook and the groups using it; its script and
// environment are never returned.
type HookInfo struct {
	Hook
	// Phase is afterCreated or beforeDelete for a hook defined inline in
	// groups; catalog hooks serve either phase and have none.
	Phase string `json:"phase,omitempty"`
	// Env names the hook's environment variables; each value is only
	// "(sealed)".
	Env       map[string]string `json:"env,omitempty"`
	Groups    []string          `json:"groups"`
	Divergent bool              `json:"divergent"`
	Source    string            `json:"source"`
}

// HookList is every named hook.
type HookList struct {
	Items []HookInfo `json:"items"`
}
