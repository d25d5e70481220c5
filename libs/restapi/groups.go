package restapi

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
	// Offerings are the template's offerings and which are unavailable
	// (offerings.go); absent when it has none.
	Offerings *GroupOfferings `json:"offerings,omitempty"`
	// Instances counts the group's instances per state.
	Instances map[string]int `json:"instances"`
}

// InstanceTemplate is how the group's VMs are created (without the
// provider parameters, which are write-only).
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

// NodeTemplate is the Node the group's VMs become.
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

// AutoscalingOptions are the group's overrides of Cluster Autoscaler's
// defaults; absent fields fall back to CA's. The names are CA's own
// (its externalgrpc NodeGroupAutoscalingOptions); durations are strings
// such as "10m". scaleDownUnneeded, scaleDownUnready and maxNodeProvision
// are deprecated spellings, still accepted in writes.
type AutoscalingOptions struct {
	ScaleDownUtilizationThreshold    *float64 `json:"scaleDownUtilizationThreshold,omitempty"`
	ScaleDownGPUUtilizationThreshold *float64 `json:"scaleDownGpuUtilizationThreshold,omitempty"`
	ZeroOrMaxNodeScaling             *bool    `json:"zeroOrMaxNodeScaling,omitempty"`
	IgnoreDaemonSetsUtilization      *bool    `json:"ignoreDaemonSetsUtilization,omitempty"`
	ScaleDownUnneededTime            string   `json:"scaleDownUnneededTime,omitempty" alias:"scaleDownUnneeded"`
	ScaleDownUnreadyTime             string   `json:"scaleDownUnreadyTime,omitempty" alias:"scaleDownUnready"`
	MaxNodeProvisionTime             string   `json:"maxNodeProvisionTime,omitempty" alias:"maxNodeProvision"`
}

// Hook describes a configured hook; its script and environment are never
// returned.
type Hook struct {
	Name      string `json:"name,omitempty"`
	Timeout   string `json:"timeout,omitempty"`
	OnFailure string `json:"onFailure,omitempty"`
	HasScript bool   `json:"hasScript"`
}

// Parallelism bounds the group's in-flight cloud work.
type Parallelism struct {
	Create int32 `json:"create"`
	Delete int32 `json:"delete"`
}

// GroupList is every node group (GET /nodegroups).
type GroupList struct {
	Items    []Group `json:"items"`
	Revision uint64  `json:"revision"`
}

// ScaleRequest is the body of POST /nodegroups/{id}/scale.
type ScaleRequest struct {
	TargetSize *int64 `json:"targetSize"`
}
