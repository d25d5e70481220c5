package rest

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/go-chi/chi/v5"

	"github.com/nodesmith/nodesmith/libs/sealed"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// Views of the catalog: instance templates, cloud accounts and hooks (from
// the catalog bucket, plus named inline definitions of groups), with the
// groups using them; and the instances' recent state transitions. Writes
// are in catalog_write.go.

// DefaultTransitions is the size of GET /transitions without ?limit=.
const DefaultTransitions = 50

func templateJSON(t *domain.InstanceTemplate) InstanceTemplate {
	return InstanceTemplate{
		Name: t.Name, Provider: t.Provider, Account: t.Account, Region: t.Region,
		Zone: t.Zone, InstanceType: t.InstanceType, Arch: t.Arch, OS: t.OS,
		HourlyPrice: t.HourlyPrice, SSHPort: t.SSHPort,
		CapacityType: t.CapacityType, MaxPrice: t.MaxPrice,
		Offerings: templateOfferingsJSON(t.Offerings), OfferingStrategy: t.OfferingStrategy,
	}
}

func templateOfferingsJSON(os []domain.Offering) []Offering {
	if len(os) == 0 {
		return nil
	}
	out := make([]Offering, len(os))
	for i, o := range os {
		out[i] = Offering{Zone: o.Zone, SubnetID: o.SubnetID, InstanceType: o.InstanceType, CapacityType: o.CapacityType}
	}
	return out
}

func offeringsOf(os []Offering) []domain.Offering {
	if len(os) == 0 {
		return nil
	}
	out := make([]domain.Offering, len(os))
	for i, o := range os {
		out[i] = domain.Offering{Zone: o.Zone, SubnetID: o.SubnetID, InstanceType: o.InstanceType, CapacityType: o.CapacityType}
	}
	return out
}

func sourceOf(s string) string {
	if s == "" {
		return "group"
	}
	return s
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func templateInfo(v app.TemplateView) TemplateInfo {
	return TemplateInfo{
		InstanceTemplate: templateJSON(v.Template), HasParameters: v.Template.ParametersJSON != "",
		HookEnv: sealed.Redact(v.Template.HookEnv), SecretParameters: sealed.Redact(v.Template.SecretParameters),
		Groups: nonNil(v.Groups), Divergent: v.Divergent, Source: sourceOf(v.Source),
	}
}

func hookInfo(v app.HookView) HookInfo {
	return HookInfo{Hook: hookJSON(v.Spec), Phase: v.Phase, Env: sealed.Redact(v.Spec.Env), Groups: nonNil(v.Groups), Divergent: v.Divergent, Source: sourceOf(v.Source)}
}

func accountJSON(v app.AccountView) Account {
	creds := AccountCredentials{Source: "cloud-adapter"}
	if v.HasSealedCredentials {
		creds = AccountCredentials{Stored: true, KeyID: v.KeyID, Source: "catalog"}
	}
	return Account{Name: v.Name, Provider: v.Provider, Regions: nonNil(v.Regions), Credentials: creds,
		Templates: nonNil(v.Templates), Groups: nonNil(v.Groups), Source: sourceOf(v.Source)}
}

// withETag sets the ETag of a catalog entry (inline entries have none) and
// reports whether the client already has it.
func withETag(w http.ResponseWriter, r *http.Request, rev uint64) bool {
	if rev == 0 {
		return false
	}
	tag := etag(rev)
	w.Header().Set("ETag", tag)
	if notModified(r, tag) {
		w.WriteHeader(http.StatusNotModified)
		return true
	}
	return false
}

func hookJSON(spec *domain.HookSpec) Hook {
	h := Hook{Name: spec.Name, Timeout: timeout(spec.Timeout), HasScript: spec.Script != ""}
	if spec.OnFailure != domain.OnFailureUnspecified {
		h.OnFailure = onFailureName(spec.OnFailure)
	}
	return h
}

func (h *handler) listTemplates(w http.ResponseWriter, r *http.Request) {
	all, err := h.svc.Templates()
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := TemplateList{Items: make([]TemplateInfo, 0, len(all))}
	for _, v := range all {
		out.Items = append(out.Items, templateInfo(v))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) getTemplate(w http.ResponseWriter, r *http.Request) {
	v, err := h.svc.Template(chi.URLParam(r, "name"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if withETag(w, r, v.Revision) {
		return
	}
	writeJSON(w, http.StatusOK, templateInfo(v))
}

func (h *handler) listAccounts(w http.ResponseWriter, r *http.Request) {
	all, err := h.svc.Accounts()
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := AccountList{Items: make([]Account, 0, len(all))}
	for _, v := range all {
		out.Items = append(out.Items, accountJSON(v))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) getAccount(w http.ResponseWriter, r *http.Request) {
	v, err := h.svc.Account(chi.URLParam(r, "name"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if withETag(w, r, v.Revision) {
		return
	}
	writeJSON(w, http.StatusOK, accountJSON(v))
}

func (h *handler) listHooks(w http.ResponseWriter, r *http.Request) {
	all, err := h.svc.Hooks()
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := HookList{Items: make([]HookInfo, 0, len(all))}
	for _, v := range all {
		out.Items = append(out.Items, hookInfo(v))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) getHook(w http.ResponseWriter, r *http.Request) {
	v, err := h.svc.Hook(chi.URLParam(r, "name"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if withETag(w, r, v.Revision) {
		return
	}
	writeJSON(w, http.StatusOK, hookInfo(v))
}

func (h *handler) listTransitions(w http.ResponseWriter, r *http.Request) {
	limit := DefaultTransitions
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > app.MaxTransitions {
			h.writeError(w, r, newError(http.StatusBadRequest, contract.CodeInvalidArgument, fmt.Sprintf("limit must be an integer between 1 and %d", app.MaxTransitions)).with("parameter", "limit"))
			return
		}
		limit = n
	}
	all, err := h.svc.RecentTransitions(r.URL.Query().Get("group"), limit)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := TransitionList{Items: make([]TransitionEntry, 0, len(all))}
	for _, v := range all {
		out.Items = append(out.Items, transitionJSON(v))
	}
	writeJSON(w, http.StatusOK, out)
}

func transitionJSON(v app.TransitionView) TransitionEntry {
	return TransitionEntry{Instance: v.Instance, Group: v.Group, Transition: transitionOf(v.Transition)}
}
