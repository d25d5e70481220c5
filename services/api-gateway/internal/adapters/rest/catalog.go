package rest

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// Read-only views of what the node groups reference: instance templates,
// cloud accounts and hooks (each group holds a resolved snapshot), and the
// instances' recent state transitions. Writes to templates, accounts and
// hooks go through the groups (PUT/PATCH /nodegroups/{id}) or lifecycle's
// configuration file.

// TemplateInfo is a named instance template and the groups using it. Its
// provider parameters (which may hold login passwords), providerID
// template and hook environment are never returned.
type TemplateInfo struct {
	InstanceTemplate
	// HasParameters says whether provider create parameters are set.
	HasParameters bool     `json:"hasParameters"`
	Groups        []string `json:"groups"`
	// Divergent: the groups hold different snapshots under this name; the
	// fields shown are those of the most recently updated group.
	Divergent bool `json:"divergent"`
}

// TemplateList is every named template.
type TemplateList struct {
	Items []TemplateInfo `json:"items"`
}

// Account is a cloud account the groups' templates reference. Its
// credentials stay with the cloud adapter and are never returned.
type Account struct {
	Name      string   `json:"name"`
	Provider  string   `json:"provider,omitempty"`
	Regions   []string `json:"regions"`
	Templates []string `json:"templates"`
	Groups    []string `json:"groups"`
}

// AccountList is every referenced account.
type AccountList struct {
	Items []Account `json:"items"`
}

// HookInfo is a named hook and the groups using it; its script and
// environment are never returned.
type HookInfo struct {
	Hook
	// Phase is afterCreated or beforeDelete.
	Phase     string   `json:"phase"`
	Groups    []string `json:"groups"`
	Divergent bool     `json:"divergent"`
}

// HookList is every named hook.
type HookList struct {
	Items []HookInfo `json:"items"`
}

// TransitionEntry is one state transition of an instance.
type TransitionEntry struct {
	Instance string `json:"instance"`
	Group    string `json:"group"`
	Transition
}

// TransitionList is the newest transitions, newest first.
type TransitionList struct {
	Items []TransitionEntry `json:"items"`
}

// DefaultTransitions is the size of GET /transitions without ?limit=.
const DefaultTransitions = 50

func templateJSON(t *statev1.InstanceTemplate) InstanceTemplate {
	return InstanceTemplate{
		Name: t.GetName(), Provider: t.GetProvider(), Account: t.GetAccount(), Region: t.GetRegion(),
		Zone: t.GetZone(), InstanceType: t.GetInstanceType(), Arch: t.GetArch(), OS: t.GetOs(),
		HourlyPrice: t.GetHourlyPrice(), SSHPort: t.GetSshPort(),
	}
}

func templateInfo(v app.TemplateView) TemplateInfo {
	return TemplateInfo{
		InstanceTemplate: templateJSON(v.Template), HasParameters: v.Template.GetParametersJson() != "",
		Groups: v.Groups, Divergent: v.Divergent,
	}
}

func accountJSON(v app.AccountView) Account {
	nonNil := func(s []string) []string {
		if s == nil {
			return []string{}
		}
		return s
	}
	return Account{Name: v.Name, Provider: v.Provider, Regions: nonNil(v.Regions), Templates: nonNil(v.Templates), Groups: nonNil(v.Groups)}
}

func hookJSON(spec *statev1.HookSpec) Hook {
	h := Hook{Name: spec.GetName(), Timeout: dur(spec.GetTimeout()), HasScript: spec.GetScript() != ""}
	if spec.GetOnFailure() != statev1.OnFailure_ON_FAILURE_UNSPECIFIED {
		h.OnFailure = spec.GetOnFailure().String()
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
		out.Items = append(out.Items, HookInfo{Hook: hookJSON(v.Spec), Phase: v.Phase, Groups: v.Groups, Divergent: v.Divergent})
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) listTransitions(w http.ResponseWriter, r *http.Request) {
	limit := DefaultTransitions
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > app.MaxTransitions {
			h.writeError(w, r, newError(http.StatusBadRequest, domain.CodeInvalidArgument, fmt.Sprintf("limit must be an integer between 1 and %d", app.MaxTransitions)).with("parameter", "limit"))
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
		t := v.Transition
		out.Items = append(out.Items, TransitionEntry{
			Instance: v.Instance, Group: v.Group,
			Transition: Transition{From: stateName(t.GetFrom()), To: stateName(t.GetTo()), Reason: t.GetReason(), At: ts(t.GetAt())},
		})
	}
	writeJSON(w, http.StatusOK, out)
}
