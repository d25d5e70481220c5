package client

// The JSON views of the REST API (services/api-gateway's rest package,
// openapi.json). They are copied, not imported: the CLI must build without
// the services' internals.

// Group is a node group.
type Group struct {
	ID                 string              `json:"id"`
	MinSize            int32               `json:"minSize"`
	MaxSize            int32               `json:"maxSize"`
	TargetSize         int32               `json:"targetSize"`
	Source             string              `json:"source,omitempty"`
	AdoptExisting      bool                `json:"adoptExisting"`
	Revision           uint64              `json:"revision"`
	UpdatedAt          string              `json:"updatedAt,omitempty"`
	InstanceTemplate   *InstanceTemplate   `json:"instanceTemplate,omitempty"`
	NodeTemplate       *NodeTemplate       `json:"nodeTemplate,omitempty"`
	AutoscalingOptions *AutoscalingOptions `json:"autoscalingOptions,omitempty"`
	Hooks              map[string]Hook     `json:"hooks,omitempty"`
	Parallelism        *Parallelism        `json:"parallelism,omitempty"`
	// Instances counts the group's instances per state.
	Instances map[string]int `json:"instances"`
}

// InstanceTemplate is how a group's VMs are created (without the provider
// parameters, which are write-only).
type InstanceTemplate struct {
	Name         string  `json:"name,omitempty"`
	Provider     string  `json:"provider,omitempty"`
	Account      string  `json:"account,omitempty"`
	Region       string  `json:"region,omitempty"`
	Zone         string  `json:"zone,omitempty"`
	InstanceType string  `json:"instanceType,omitempty"`
	Arch         string  `json:"arch,omitempty"`
	OS           string  `json:"os,omitempty"`
	HourlyPrice  float64 `json:"hourlyPrice,omitempty"`
	SSHPort      uint32  `json:"sshPort,omitempty"`
}

// NodeTemplate is the Node a group's VMs become.
type NodeTemplate struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Taints      []Taint           `json:"taints,omitempty"`
	Capacity    map[string]string `json:"capacity,omitempty"`
	Allocatable map[string]string `json:"allocatable,omitempty"`
}

// Taint is a node taint.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// AutoscalingOptions are a group's overrides of Cluster Autoscaler's
// defaults.
type AutoscalingOptions struct {
	ScaleDownUtilizationThreshold    *float64 `json:"scaleDownUtilizationThreshold,omitempty"`
	ScaleDownGPUUtilizationThreshold *float64 `json:"scaleDownGpuUtilizationThreshold,omitempty"`
	ZeroOrMaxNodeScaling             *bool    `json:"zeroOrMaxNodeScaling,omitempty"`
	IgnoreDaemonSetsUtilization      *bool    `json:"ignoreDaemonSetsUtilization,omitempty"`
	ScaleDownUnneeded                string   `json:"scaleDownUnneeded,omitempty"`
	ScaleDownUnready                 string   `json:"scaleDownUnready,omitempty"`
	MaxNodeProvision                 string   `json:"maxNodeProvision,omitempty"`
}

// Hook describes a configured hook (never its script or environment).
type Hook struct {
	Name      string `json:"name,omitempty"`
	Timeout   string `json:"timeout,omitempty"`
	OnFailure string `json:"onFailure,omitempty"`
	HasScript bool   `json:"hasScript"`
}

// Parallelism bounds a group's in-flight cloud work.
type Parallelism struct {
	Create int32 `json:"create"`
	Delete int32 `json:"delete"`
}

// Instance is an instance; History and HookOutputTail only in the detail
// view (HookOutputTail only for admin tokens).
type Instance struct {
	ID             string     `json:"id"`
	Group          string     `json:"group"`
	State          string     `json:"state"`
	ProviderID     string     `json:"providerID"`
	CloudID        string     `json:"cloudID,omitempty"`
	NodeName       string     `json:"nodeName,omitempty"`
	PrivateIP      string     `json:"privateIP,omitempty"`
	Attempt        uint32     `json:"attempt"`
	Retries        uint32     `json:"retries"`
	BatchID        string     `json:"batchID,omitempty"`
	Adopted        bool       `json:"adopted,omitempty"`
	CreationFailed bool       `json:"creationFailed"`
	Released       bool       `json:"released"`
	InFlight       bool       `json:"inFlight"`
	CreatedAt      string     `json:"createdAt,omitempty"`
	StateSince     string     `json:"stateSince,omitempty"`
	Deadline       string     `json:"deadline,omitempty"`
	NextRetryAt    string     `json:"nextRetryAt,omitempty"`
	LastError      *ErrorInfo `json:"lastError,omitempty"`
	Revision       uint64     `json:"revision"`
	TraceID        string     `json:"traceID,omitempty"`

	History        []Transition `json:"history,omitempty"`
	HookOutputTail *string      `json:"hookOutputTail,omitempty"`
}

// ErrorInfo is an instance's last error.
type ErrorInfo struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Class     int32  `json:"class"`
	Retryable bool   `json:"retryable"`
	At        string `json:"at,omitempty"`
}

// Transition is one entry of an instance's history.
type Transition struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Reason string `json:"reason,omitempty"`
	At     string `json:"at,omitempty"`
}

// TransitionEntry is one state transition of an instance (GET
// /transitions, and the watch stream's transition event).
type TransitionEntry struct {
	Instance string `json:"instance"`
	Group    string `json:"group"`
	Transition
}

// TemplateInfo is a named instance template and the groups using it.
type TemplateInfo struct {
	InstanceTemplate
	HasParameters    bool              `json:"hasParameters"`
	HookEnv          map[string]string `json:"hookEnv,omitempty"`
	SecretParameters map[string]string `json:"secretParameters,omitempty"`
	Groups           []string          `json:"groups"`
	Divergent        bool              `json:"divergent"`
	Source           string            `json:"source"`
}

// Account is a cloud account (never its credentials).
type Account struct {
	Name        string             `json:"name"`
	Provider    string             `json:"provider,omitempty"`
	Regions     []string           `json:"regions"`
	Credentials AccountCredentials `json:"credentials"`
	Templates   []string           `json:"templates"`
	Groups      []string           `json:"groups"`
	Source      string             `json:"source"`
}

// AccountCredentials says where an account's credentials come from.
type AccountCredentials struct {
	Stored bool   `json:"stored"`
	KeyID  string `json:"keyId,omitempty"`
	Source string `json:"source"`
}

// HookInfo is a named hook and the groups using it.
type HookInfo struct {
	Hook
	Phase     string            `json:"phase,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Groups    []string          `json:"groups"`
	Divergent bool              `json:"divergent"`
	Source    string            `json:"source"`
}
