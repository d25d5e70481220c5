package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/nodesmith/nodesmith/libs/restapi"
)

// Adopt hands running VMs nodesmith did not create to group (dryRun: plans
// it, writing nothing); at most restapi.MaxAdoptVMs VMs a call.
func (c *Client) Adopt(ctx context.Context, group string, vms []restapi.AdoptVM, dryRun bool) (restapi.AdoptResponse, error) {
	body := restapi.AdoptRequest{Instances: vms, DryRun: dryRun}
	path := "/nodegroups/" + esc(group) + "/adopt"
	resp, err := c.do(ctx, request{method: http.MethodPost, path: path, body: body})
	if err != nil {
		return restapi.AdoptResponse{}, err
	}
	var out restapi.AdoptResponse
	if err := json.Unmarshal(resp.body, &out); err != nil {
		return restapi.AdoptResponse{}, fmt.Errorf("POST %s: decoding the answer: %w", path, err)
	}
	return out, nil
}
