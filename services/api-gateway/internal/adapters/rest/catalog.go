package rest

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/nodesmith/nodesmith/libs/sealed"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// Views of the catalog: instance templates, cloud accounts and hooks (from
// the catalog bucket, plus named inline definitions of groups), with the
// groups using them; and the instances' recent state transitions. Writes
// are in catalog_write.go.

// TemplateInfo is a named instance template and the groups using it. Its
// provider parameters (which may hold login passwords), providerID
// template and hook environment are never returned.
type TemplateInfo struct {
	InstanceTemplate
	// HasParameters says whether provider create parameters are set.
	HasParameters bool `json:"hasParameters"`
	// HookEnv and SecretParameters name the template's hook environment
	// variables and secret parameters; each value is only "(sealed)".
	HookEnv          map[string]string `json:"hookEnv,omitempty"`
	SecretParameters map[string]string `json:"secretParameters,omitempty"`
	Groups           []string          `json:"groups"`
	// Divergent: some group holds another version under this name (a
	// change not yet applied everywhere, or a file group's own template).
	Divergent bool `json:"divergent"`
	// Source is "config" (the configuration file owns it), "api", or
	// "group" for a template defined inline in groups only.
	Source string `json:"source"`
}

// TemplateList is every named template.
type TemplateList struct {
	Items []TemplateInfo `json:"items"`
}

// Account is a cloud account. Its credentials are never returned: only
// whether the catalog holds them and where they come from.
type Account struct {
	Name        string             `json:"name"`
	Provider    string             `json:"provider,omitempty"`
	Regions     []string           `json:"regions"`
	Credentials AccountCredentials `json:"credentials"`
	Templates   []string           `json:"templates"`
	Groups      []string           `json:"groups"`
	// Source is "config", "api", or "group" for an account only groups'
	// templates name.
	Source string `json:"source"`
}

// AccountCredentials says where an account's credentials come from.
type AccountCredentials struct {
	// Stored: the catalog holds them, sealed under the key KeyID; the
	// cloud adapter opens them with the same key.
	Stored bool   `json:"stored"`
	KeyID  string `json:"keyId,omitempty"`
	// Source is "catalog" (stored) or "cloud-adapter" (its credentials
	// files or environment, which this API cannot see).
	Source string `json:"source"`
}

// AccountList is every referenced account.
type AccountList struct {
	Items []Account `json:"items"`
}

// HookInfo is a named hook and the groups using it; its script and
// environment are never returned.
type HookInfo struct {
	Hook
	// Phase is afterCreated or beforeDelete for a hook defined inline in
	// groups; catalog hooks serve either phase and have none.
	Phase string `json:"phase,omitempty"`
	// Env names the hook's environment variables; each value is only
	// "(sealed)".
	Env       map[string]string `json:"env,omitempty"`
	Groups    []string          `json:"groups"`
	Divergent bool              `json:"divergent"`
	Source    string            `json:"source"`
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
		InstanceTemplate: templateJSON(v.Template), HasParameters: v.Template.GetParametersJson() != "",
		HookEnv: sealed.Redact(v.Template.GetHookEnv()), SecretParameters: sealed.Redact(v.Template.GetSecretParameters()),
		Groups: nonNil(v.Groups), Divergent: v.Divergent, Source: sourceOf(v.Source),
	}
}

func hookInfo(v app.HookView) HookInfo {
	return HookInfo{Hook: hookJSON(v.Spec), Phase: v.Phase, Env: sealed.Redact(v.Spec.GetEnv()), Groups: nonNil(v.Groups), Divergent: v.Divergent, Source: sourceOf(v.Source)}
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
		out.Items = append(out.Items, transitionJSON(v))
	}
	writeJSON(w, http.StatusOK, out)
}

func transitionJSON(v app.TransitionView) TransitionEntry {
	t := v.Transition
	return TransitionEntry{
		Instance: v.Instance, Group: v.Group,
		Transition: Transition{From: stateName(t.GetFrom()), To: stateName(t.GetTo()), Reason: t.GetReason(), At: ts(t.GetAt())},
	}
}
