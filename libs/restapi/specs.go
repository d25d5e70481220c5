package restapi

import "encoding/json"

// The bodies of the writes (PUT /nodegroups/{id}, /templates/{name},
// /hooks/{name}, /accounts/{name}; a PATCH merges into the same
// documents). Hook scripts, hook environments, provider parameters and
// credentials are write-only: accepted here, sealed by the gateway where
// secret, never returned by a view.

// GroupSpec is the body of PUT /nodegroups/{id} and the document a PATCH
// merges into.
type GroupSpec struct {
	// ID names the group: required in the configuration file; in the API
	// the path names it and ID, if set, must be the same.
	ID string `json:"id,omitempty"`
	// MinSize defaults to 0.
	MinSize *int32 `json:"minSize,omitempty"`
	// MaxSize is required; 0 is allowed (the group is kept empty, as
	// Cluster Autoscaler allows).
	MaxSize *int32 `json:"maxSize,omitempty"`
	// TargetSize defaults to the current target (clamped to the bounds) on
	// replace and to minSize on create.
	TargetSize    *int32 `json:"targetSize,omitempty"`
	AdoptExisting bool   `json:"adoptExisting,omitempty"`
	// InstanceTemplate is a template by name (a JSON string, or an object
	// with the name only) or an inline definition.
	InstanceTemplate   *InstanceTemplateSpec `json:"instanceTemplate,omitempty"`
	NodeTemplate       *NodeTemplate         `json:"nodeTemplate,omitempty"`
	AutoscalingOptions *AutoscalingOptions   `json:"autoscalingOptions,omitempty"`
	Hooks              *HooksSpec            `json:"hooks,omitempty"`
	Parallelism        *Parallelism          `json:"parallelism,omitempty"`
}

// InstanceTemplateSpec is InstanceTemplate plus its write-only fields (the
// body of PUT /templates/{name}).
type InstanceTemplateSpec struct {
	InstanceTemplate
	// Parameters are the provider's create parameters (for Tencent, the
	// RunInstances request fields) as a JSON object.
	Parameters         json.RawMessage `json:"parameters,omitempty"`
	ProviderIDTemplate string          `json:"providerIDTemplate,omitempty"`
	// HookEnv values are sealed by the gateway (never returned).
	HookEnv map[string]string `json:"hookEnv,omitempty"`
	// SecretParameters are more create parameters, as a JSON object like
	// Parameters, that are secret: sealed by the gateway, merged into
	// Parameters only by the cloud adapter, never returned.
	SecretParameters json.RawMessage `json:"secretParameters,omitempty"`
}

// HooksSpec holds the group's hooks.
type HooksSpec struct {
	AfterCreated *HookSpec `json:"afterCreated,omitempty"`
	BeforeDelete *HookSpec `json:"beforeDelete,omitempty"`
}

// HookSpec is a hook with its script (the body of PUT /hooks/{name}).
type HookSpec struct {
	Name string `json:"name,omitempty"`
	// File is the script's file (configuration file only, relative to
	// the file's directory); the API takes the script itself.
	File   string `json:"file,omitempty"`
	Script string `json:"script,omitempty"`
	// Timeout is a duration such as "10m" (0 or absent: the hook
	// runner's default).
	Timeout string            `json:"timeout,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// OnFailure (beforeDelete only): continue (the default) or block; any
	// case is accepted, ON_FAILURE_CONTINUE and ON_FAILURE_BLOCK are
	// deprecated spellings.
	OnFailure string `json:"onFailure,omitempty"`
}

// AccountSpec is the body of PUT /accounts/{name}. Credentials are
// write-only: sealed by the gateway (it needs --secrets-key-file), opened
// only by the cloud adapter, never returned.
type AccountSpec struct {
	// Provider defaults to cloudspec.DefaultProvider (tencentcloud).
	Provider string `json:"provider,omitempty"`
	// Regions the account is used in; the first is the default region of
	// templates on the account that name none.
	// The configuration file's single "region" is its deprecated
	// spelling.
	Regions []string `json:"regions,omitempty" alias:"region"`
	// Credentials replace the stored ones. Omitted: the stored credentials
	// (if any) are kept. Never in the configuration file.
	Credentials *CredentialsSpec `json:"credentials,omitempty"`
	// ClearCredentials drops the stored credentials: the cloud adapter's
	// files or environment then provide the account's credentials.
	ClearCredentials bool `json:"clearCredentials,omitempty"`
}

// CredentialsSpec is a cloud API key. The JSON names are Tencent Cloud's
// (they came first) and mean the same for every cloud: on Alibaba Cloud
// secretId is the AccessKeyId, secretKey the AccessKeySecret and token the
// STS SecurityToken (libs/cloudspec CredentialNames).
type CredentialsSpec struct {
	// SecretID is the key id.
	SecretID string `json:"secretId"`
	// SecretKey is the key's secret.
	SecretKey string `json:"secretKey"`
	// Token is the security token of temporary (STS) credentials.
	Token string `json:"token,omitempty"`
}

// String never shows the key's secret or token (a spec logged or printed
// by mistake leaks nothing).
func (c CredentialsSpec) String() string {
	return "CredentialsSpec{SecretID:" + c.SecretID + " SecretKey:(redacted) Token:(redacted)}"
}
