package restapi

// Instance is an instance; History and HookOutputTail only in detail views
// (HookOutputTail only for admin tokens).
type Instance struct {
	ID         string `json:"id"`
	Group      string `json:"group"`
	State      string `json:"state"`
	ProviderID string `json:"providerID"`
	CloudID    string `json:"cloudID,omitempty"`
	NodeName   string `json:"nodeName,omitempty"`
	PrivateIP  string `json:"privateIP,omitempty"`
	// Zone, InstanceType and CapacityType ("spot" or "on-demand") say
	// where the VM was created: the offering it landed on. Absent for
	// instances created before this was recorded and for templates
	// without offerings (the template's zone and type).
	Zone         string `json:"zone,omitempty"`
	InstanceType string `json:"instanceType,omitempty"`
	CapacityType string `json:"capacityType,omitempty"`
	Attempt      uint32 `json:"attempt"`
	Retries      uint32 `json:"retries"`
	BatchID      string `json:"batchID,omitempty"`
	// Adopted: the instance adopts an existing Node (not created by us).
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
	// TraceID is the W3C trace id of the operation that created or
	// released the instance (the trace its commands continue).
	TraceID string `json:"traceID,omitempty"`

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

// InstanceList is one page of instances (GET /instances).
type InstanceList struct {
	Items []Instance `json:"items"`
	// Continue is passed as ?continue= for the next page; empty on the last.
	Continue string `json:"continue,omitempty"`
	// Revision is the instances bucket revision the page was read at.
	Revision uint64 `json:"revision"`
}

// TransitionEntry is one state transition of an instance (GET
// /transitions, and the watch stream's transition event).
type TransitionEntry struct {
	Instance string `json:"instance"`
	Group    string `json:"group"`
	Transition
}

// TransitionList is the newest transitions, newest first.
type TransitionList struct {
	Items []TransitionEntry `json:"items"`
}
