package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// MaxAdoptVMs is the most VMs one adopt request takes.
const MaxAdoptVMs = 100

// AdoptVM is one VM to adopt (POST /nodegroups/{id}/adopt).
type AdoptVM struct {
	CloudID    string `json:"cloudID"`
	NodeName   string `json:"nodeName"`
	ProviderID string `json:"providerID"`
	PrivateIP  string `json:"privateIP,omitempty"`
}

// AdoptOutcome is the outcome for one VM.
type AdoptOutcome struct {
	AdoptVM
	Result     string `json:"result"`
	InstanceID string `json:"instanceID,omitempty"`
	Message    string `json:"message,omitempty"`
}

// AdoptResponse answers an adoption.
type AdoptResponse struct {
	Group          string         `json:"group"`
	DryRun         bool           `json:"dryRun"`
	Results        []AdoptOutcome `json:"results"`
	Adopted        int            `json:"adopted"`
	AlreadyAdopted int            `json:"alreadyAdopted"`
	Refused        int            `json:"refused"`
}

// Adopt hands running VMs nodesmith did not create to group (dryRun: plans
// it, writing nothing).
func (c *Client) Adopt(ctx context.Context, group string, vms []AdoptVM, dryRun bool) (AdoptResponse, error) {
	body := struct {
		Instances []AdoptVM `json:"instances"`
		DryRun    bool      `json:"dryRun"`
	}{vms, dryRun}
	path := "/nodegroups/" + esc(group) + "/adopt"
	resp, err := c.do(ctx, request{method: http.MethodPost, path: path, body: body})
	if err != nil {
		return AdoptResponse{}, err
	}
	var out AdoptResponse
	if err := json.Unmarshal(resp.body, &out); err != nil {
		return AdoptResponse{}, fmt.Errorf("POST %s: decoding the answer: %w", path, err)
	}
	return out, nil
}
