package restapi

// MaxAdoptVMs is the most VMs one adopt request names (lifecycle's bound).
const MaxAdoptVMs = 100

// AdoptVM is one VM of an AdoptRequest: a running VM that nodesmith did
// not create, and its Node.
type AdoptVM struct {
	CloudID    string `json:"cloudID"`
	NodeName   string `json:"nodeName"`
	ProviderID string `json:"providerID"`
	PrivateIP  string `json:"privateIP,omitempty"`
}

// AdoptRequest is the body of POST /nodegroups/{id}/adopt.
type AdoptRequest struct {
	Instances []AdoptVM `json:"instances"`
	DryRun    bool      `json:"dryRun"`
}

// Adopt results.
const (
	AdoptResultAdopted        = "adopted"
	AdoptResultAlreadyAdopted = "already_adopted"
	AdoptResultRefused        = "refused"
)

// AdoptOutcome is what the adoption did (dry run: would do) with one VM.
type AdoptOutcome struct {
	AdoptVM
	// Result is AdoptResultAdopted, AdoptResultAlreadyAdopted or
	// AdoptResultRefused.
	Result     string `json:"result"`
	InstanceID string `json:"instanceID,omitempty"`
	Message    string `json:"message,omitempty"`
}

// AdoptResponse answers an adopt request: the outcome per VM in the
// request's order, and their counts.
type AdoptResponse struct {
	Group          string         `json:"group"`
	DryRun         bool           `json:"dryRun"`
	Results        []AdoptOutcome `json:"results"`
	Adopted        int            `json:"adopted"`
	AlreadyAdopted int            `json:"alreadyAdopted"`
	Refused        int            `json:"refused"`
}
