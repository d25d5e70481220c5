package rest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/go-chi/chi/v5"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/libs/sealed"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// Writes to the catalog: instance templates, cloud accounts and hooks,
// each under its name. They follow PUT /nodegroups/{id}: without If-Match
// PUT only creates, If-Match "<rev>" replaces that revision, If-Match *
// creates or replaces; DELETE takes an optional If-Match. Lifecycle
// stores the entry and gives every API group that names a changed template
// or hook the new version (for the VMs it creates from then on).

// cloudNames says what the credential fields are called by the account's
// cloud, when it is not Tencent Cloud's naming already.
func cloudNames(provider string) string {
	if provider == "" {
		provider = cloudspec.DefaultProvider
	}
	p, ok := cloudspec.Lookup(provider)
	if !ok || p.Name == cloudspec.Tencent {
		return ""
	}
	return fmt.Sprintf(" (the %s %s and %s)", p.Title, p.Credentials.KeyID, p.Credentials.Secret)
}

// catalogNameParam returns the {name} path parameter if it is a valid name.
func catalogNameParam(r *http.Request) (string, error) {
	name := chi.URLParam(r, "name")
	if p := contract.ValidName(name); p != "" {
		return "", newError(http.StatusBadRequest, contract.CodeInvalidArgument, "invalid name: "+p).with("field", "name")
	}
	return name, nil
}

// revisionConflict turns a revision mismatch (Aborted) into 412 on
// conditional writes; other errors keep their status (a FailedPrecondition
// from lifecycle, such as an entry still in use, is 409).
func revisionConflict(err error) error {
	if domain.CodeOf(err) == contract.CodeAborted {
		return newError(http.StatusPreconditionFailed, contract.CodeAborted, domain.MessageOf(err))
	}
	return err
}

// writeCatalog sends e and answers with the stored entry.
func (h *handler) writeCatalog(w http.ResponseWriter, r *http.Request, e *domain.CatalogEntry, rev uint64, anyRev bool, kind, name string, render func() (any, error)) {
	view, created, err := h.svc.PutCatalogEntry(r.Context(), e, rev, anyRev)
	if err != nil {
		h.writeError(w, r, revisionConflict(err))
		return
	}
	h.log.InfoContext(r.Context(), "catalog entry written by operator", "kind", kind, "name", name, "created", created, "role", roleFrom(r).String())
	body, err := render()
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/api/v1/"+kind+"/"+name)
	}
	w.Header().Set("ETag", etag(view.Revision))
	writeJSON(w, status, body)
}

// decodeCatalogPut reads what every catalog PUT carries: the entry's name
// from the path, the If-Match precondition and the JSON body into spec.
func decodeCatalogPut(w http.ResponseWriter, r *http.Request, spec any) (name string, rev uint64, anyRev bool, err error) {
	if name, err = catalogNameParam(r); err != nil {
		return "", 0, false, err
	}
	if rev, anyRev, _, err = ifMatch(r); err != nil {
		return "", 0, false, err
	}
	if err = decodeSpec(w, r, spec); err != nil {
		return "", 0, false, err
	}
	return name, rev, anyRev, nil
}

func (h *handler) putTemplate(w http.ResponseWriter, r *http.Request) {
	var spec InstanceTemplateSpec
	name, rev, anyRev, err := decodeCatalogPut(w, r, &spec)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	t, err := h.templateRecord(name, &spec)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.writeCatalog(w, r, &domain.CatalogEntry{Template: t}, rev, anyRev, app.KindTemplates, name, func() (any, error) {
		v, err := h.svc.Template(name)
		return templateInfo(v), err
	})
}

// templateRecord validates a template body; references are checked
// against the catalog this gateway sees (lifecycle checks again).
func (h *handler) templateRecord(name string, spec *InstanceTemplateSpec) (*domain.InstanceTemplate, error) {
	if spec.Name != "" && spec.Name != name {
		return nil, invalid("name", "%q differs from the name in the path %q", spec.Name, name)
	}
	if err := validateSpec(spec.Validate()); err != nil {
		return nil, err
	}
	acct, ok := h.svc.CatalogEntry(app.KindAccounts, spec.Account)
	if !ok {
		return nil, newError(http.StatusUnprocessableEntity, contract.CodeFailedPrecondition,
			fmt.Sprintf("account: cloud account %q does not exist (create it with PUT /api/v1/accounts/%s)", spec.Account, spec.Account)).
			with("field", "account")
	}
	provider := spec.Provider
	if provider == "" {
		provider = accountProvider(acct)
	}
	if provider == "" {
		provider = cloudspec.DefaultProvider
	}
	if ap := accountProvider(acct); ap != "" && ap != provider {
		return nil, invalid("provider", "%q differs from the provider %q of account %q", provider, ap, spec.Account)
	}
	params, err := templateParameters(provider, spec)
	if err != nil {
		return nil, err
	}
	t := &domain.InstanceTemplate{
		Name: name, Provider: provider, Account: spec.Account, Region: spec.Region, Zone: spec.Zone,
		InstanceType: spec.InstanceType, Arch: spec.Arch, OS: spec.OS, HourlyPrice: spec.HourlyPrice, SSHPort: spec.SSHPort,
		ParametersJSON: params, ProviderIDTemplate: spec.ProviderIDTemplate, HookEnv: spec.HookEnv,
		CapacityType: spec.CapacityType, MaxPrice: spec.MaxPrice,
		Offerings: offeringsOf(spec.Offerings), OfferingStrategy: spec.OfferingStrategy,
	}
	if t.SecretParameters, err = secretParameters("secretParameters", spec.SecretParameters); err != nil {
		return nil, err
	}
	if err := h.sealTemplate("", t); err != nil {
		return nil, err
	}
	return t, nil
}

// templateParameters validates the provider parameters and returns them
// compacted. They must be a JSON object; for a known provider
// (libs/cloudspec) they must be a valid create request, and its zone and
// instance type must agree with the template's (whichever is given fills
// the other, so the cloud call and the template node Cluster Autoscaler
// sees describe the same VM). A disagreement is a 400, parameters the
// cloud would refuse a 422, each naming the field. The capacity type and
// max price are written into the parameters; offerings are checked (a bad
// offering, capacity type, max price or strategy is a 422 naming the
// field, such as "offerings[1].zone") and the first one's zone and
// instance type become the template's.
func templateParameters(provider string, spec *InstanceTemplateSpec) (string, error) {
	raw := bytes.TrimSpace(spec.Parameters)
	if len(raw) == 0 || string(raw) == "null" {
		raw = nil
	}
	p, known := cloudspec.Lookup(provider)
	if !known {
		if raw == nil {
			return "", nil
		}
		var obj map[string]any
		var compact bytes.Buffer
		if err := json.Unmarshal(raw, &obj); err != nil || obj == nil || json.Compact(&compact, raw) != nil {
			return "", invalid("parameters", "must be a JSON object")
		}
		return compact.String(), nil
	}
	t := cloudspec.Template{
		Zone: spec.Zone, InstanceType: spec.InstanceType, Parameters: string(raw),
		CapacityType: spec.CapacityType, MaxPrice: spec.MaxPrice, OfferingStrategy: spec.OfferingStrategy,
	}
	for _, o := range spec.Offerings {
		t.Offerings = append(t.Offerings, cloudspec.Offering(o))
	}
	if errs := p.Reconcile(&t); len(errs) > 0 {
		if offeringField(errs[0].Path) {
			return "", newError(http.StatusUnprocessableEntity, contract.CodeInvalidArgument,
				errs[0].Path+": "+errs[0].Msg).with("field", errs[0].Path)
		}
		return "", invalid(errs[0].Path, "%s", errs[0].Msg)
	}
	// The secret parameters' names are checked too (their values may be
	// sealed already); a malformed secretParameters is reported later.
	var secret map[string]json.RawMessage
	_ = json.Unmarshal(spec.SecretParameters, &secret)
	if errs := p.ValidateParameters(t.Parameters, slices.Sorted(maps.Keys(secret))...); len(errs) > 0 {
		return "", newError(http.StatusUnprocessableEntity, contract.CodeInvalidArgument,
			fieldErrors(p.Title, errs)).with("field", errs[0].Path)
	}
	spec.Zone, spec.InstanceType = t.Zone, t.InstanceType
	spec.CapacityType, spec.MaxPrice = t.CapacityType, t.MaxPrice
	return t.Parameters, nil
}

// offeringField reports whether a template error is about its offerings,
// capacity type or max price: values the cloud cannot serve (422), not a
// disagreement between two fields of the body (400).
func offeringField(path string) bool {
	for _, f := range []string{"offerings", "offeringStrategy", "capacityType", "maxPrice"} {
		if path == f || strings.HasPrefix(path, f+"[") || strings.HasPrefix(path, f+".") {
			return true
		}
	}
	return false
}

// fieldErrors joins a cloud's parameter problems into one message.
func fieldErrors(cloud string, errs []cloudspec.FieldError) string {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return "not a valid " + cloud + " instance template: " + strings.Join(msgs, "; ")
}

func (h *handler) putAccount(w http.ResponseWriter, r *http.Request) {
	var spec AccountSpec
	name, rev, anyRev, err := decodeCatalogPut(w, r, &spec)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if errs := spec.Validate(); len(errs) > 0 {
		if errs[0].Field == "credentials" {
			errs[0].Message += cloudNames(spec.Provider)
		}
		h.writeError(w, r, validateSpec(errs))
		return
	}
	a := &domain.CloudAccount{Name: name, Provider: spec.Provider, Regions: spec.Regions}
	switch c := spec.Credentials; {
	case c != nil:
		if h.secrets == nil {
			h.writeError(w, r, newError(http.StatusServiceUnavailable, contract.CodeUnavailable,
				"credentials cannot be stored: the gateway has no secrets key (--secrets-key-file); store them in the cloud adapter's credentials files, or configure the key").
				with("field", "credentials"))
			return
		}
		blob, err := h.secrets.SealCredentials(name, sealed.Credentials{
			KeyID: strings.TrimSpace(c.SecretID), Secret: strings.TrimSpace(c.SecretKey), SecurityToken: strings.TrimSpace(c.Token),
		})
		if err != nil {
			// The error never holds the secret (see libs/sealed).
			h.writeError(w, r, fmt.Errorf("sealing credentials: %w", err))
			return
		}
		a.SealedCredentials, a.KeyID = blob, h.secrets.ID()
	case !spec.ClearCredentials:
		// Keep what is stored: a client that read the account (which never
		// shows credentials) and writes it back must not drop them.
		if cur, ok := h.svc.CatalogEntry(app.KindAccounts, name); ok && cur.Entry.Account != nil {
			a.SealedCredentials, a.KeyID = cur.Entry.Account.SealedCredentials, cur.Entry.Account.KeyID
		}
	}
	h.writeCatalog(w, r, &domain.CatalogEntry{Account: a}, rev, anyRev, app.KindAccounts, name, func() (any, error) {
		v, err := h.svc.Account(name)
		return accountJSON(v), err
	})
}

func (h *handler) putHook(w http.ResponseWriter, r *http.Request) {
	var spec HookSpec
	name, rev, anyRev, err := decodeCatalogPut(w, r, &spec)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if spec.Name != "" && spec.Name != name {
		h.writeError(w, r, invalid("name", "%q differs from the name in the path %q", spec.Name, name))
		return
	}
	if err := validateSpec(spec.Validate()); err != nil {
		h.writeError(w, r, err)
		return
	}
	hook := &domain.HookSpec{Name: name, Script: spec.Script, Timeout: timeoutOf(spec.Timeout), Env: spec.Env, OnFailure: onFailureOf(spec.OnFailure)}
	if err := h.sealHook("", hook); err != nil {
		h.writeError(w, r, err)
		return
	}
	h.writeCatalog(w, r, &domain.CatalogEntry{Hook: hook}, rev, anyRev, app.KindHooks, name, func() (any, error) {
		v, err := h.svc.Hook(name)
		return hookInfo(v), err
	})
}

// deleteCatalog deletes an entry at the If-Match revision if given, else
// at the revision this gateway sees.
func (h *handler) deleteCatalog(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, err := catalogNameParam(r)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		rev, _, _, err := ifMatch(r)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		if err := h.svc.DeleteCatalogEntry(r.Context(), kind, name, rev); err != nil {
			h.writeError(w, r, revisionConflict(err))
			return
		}
		h.log.InfoContext(r.Context(), "catalog entry deleted by operator", "kind", kind, "name", name, "role", roleFrom(r).String())
		w.WriteHeader(http.StatusNoContent)
	}
}

// checkGroupRefs makes sure the templates and hooks a group names without
// defining them exist in the catalog (422 otherwise).
func (h *handler) checkGroupRefs(g *domain.NodeGroup) error {
	if t := g.InstanceTemplate; t != nil && t.Name != "" && t.Provider == "" {
		if _, ok := h.svc.CatalogEntry(app.KindTemplates, t.Name); !ok {
			return newError(http.StatusUnprocessableEntity, contract.CodeFailedPrecondition,
				fmt.Sprintf("instanceTemplate: instance template %q does not exist", t.Name)).with("field", "instanceTemplate.name")
		}
	}
	for _, hk := range []struct {
		field string
		spec  *domain.HookSpec
	}{{"hooks.afterCreated", g.Hook(true)}, {"hooks.beforeDelete", g.Hook(false)}} {
		if hk.spec == nil || hk.spec.Name == "" || hk.spec.Script != "" {
			continue
		}
		if _, ok := h.svc.CatalogEntry(app.KindHooks, hk.spec.Name); !ok {
			return newError(http.StatusUnprocessableEntity, contract.CodeFailedPrecondition,
				fmt.Sprintf("%s: hook %q does not exist", hk.field, hk.spec.Name)).with("field", hk.field+".name")
		}
	}
	return nil
}

// accountProvider is the provider of a catalog account entry, "" if it
// names none.
func accountProvider(v app.CatalogView) string {
	if v.Entry == nil || v.Entry.Account == nil {
		return ""
	}
	return v.Entry.Account.Provider
}
