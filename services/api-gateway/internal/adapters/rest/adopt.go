package rest

import (
	"fmt"
	"net/http"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/go-chi/chi/v5"

	"github.com/nodesmith/nodesmith/libs/restapi"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/ports"
)

// adopt hands running VMs that nodesmith did not create (the prototype's)
// to a group, as Running instances (admin only, as every write). Nothing
// is created or terminated; a VM already owned is reported, never adopted
// twice; beyond the group's max size the whole request is refused.
func (h *handler) adopt(w http.ResponseWriter, r *http.Request) {
	var req AdoptRequest
	if err := decodeJSON(r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	if len(req.Instances) == 0 || len(req.Instances) > MaxAdoptVMs {
		h.writeError(w, r, newError(http.StatusBadRequest, contract.CodeInvalidArgument,
			fmt.Sprintf("instances must list between 1 and %d VMs, got %d", MaxAdoptVMs, len(req.Instances))).with("field", "instances"))
		return
	}
	id := chi.URLParam(r, "id")
	op := ports.AdoptVMs{Group: id, DryRun: req.DryRun}
	for i, vm := range req.Instances {
		for _, f := range []struct{ name, v string }{{"cloudID", vm.CloudID}, {"nodeName", vm.NodeName}, {"providerID", vm.ProviderID}} {
			if f.v == "" {
				field := fmt.Sprintf("instances[%d].%s", i, f.name)
				h.writeError(w, r, newError(http.StatusBadRequest, contract.CodeInvalidArgument, field+" is required").with("field", field))
				return
			}
		}
		op.VMs = append(op.VMs, ports.AdoptVM{CloudID: vm.CloudID, NodeName: vm.NodeName, ProviderID: vm.ProviderID, PrivateIP: vm.PrivateIP})
	}
	outs, err := h.svc.AdoptVMs(r.Context(), op)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	resp := AdoptResponse{Group: id, DryRun: req.DryRun, Results: make([]AdoptOutcome, 0, len(outs))}
	for _, o := range outs {
		out := AdoptOutcome{
			AdoptVM:    AdoptVM{CloudID: o.VM.CloudID, NodeName: o.VM.NodeName, ProviderID: o.VM.ProviderID, PrivateIP: o.VM.PrivateIP},
			InstanceID: o.InstanceID,
			Message:    o.Message,
		}
		switch o.Result {
		case ports.Adopted:
			out.Result = restapi.AdoptResultAdopted
			resp.Adopted++
		case ports.AlreadyAdopted:
			out.Result = restapi.AdoptResultAlreadyAdopted
			resp.AlreadyAdopted++
		default:
			out.Result = restapi.AdoptResultRefused
			resp.Refused++
		}
		resp.Results = append(resp.Results, out)
	}
	h.log.InfoContext(r.Context(), "VMs adopted by operator", "group", id, "dry_run", req.DryRun, "adopted", resp.Adopted,
		"already_adopted", resp.AlreadyAdopted, "refused", resp.Refused, "role", roleFrom(r).String())
	writeJSON(w, http.StatusOK, resp)
}
