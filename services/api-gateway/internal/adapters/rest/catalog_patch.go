package rest

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// PATCH /templates/{name}: a JSON merge patch (RFC 7386) over the stored
// template, write-only fields included. A client that can only read a
// template (GET never shows its parameters, providerID template, hook
// environment or secret parameters) can change what it sees without
// dropping what it cannot see, which a PUT of what it read would do.

// readMergePatch checks a PATCH's content type and reads its body.
func readMergePatch(r *http.Request) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/merge-patch+json") && !strings.HasPrefix(ct, "application/json") {
		return nil, newError(http.StatusUnsupportedMediaType, contract.CodeInvalidArgument, "PATCH takes application/merge-patch+json")
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, newError(http.StatusRequestEntityTooLarge, contract.CodeInvalidArgument, "request body exceeds "+strconv.FormatInt(tooBig.Limit, 10)+" bytes")
		}
		return nil, newError(http.StatusBadRequest, contract.CodeInvalidArgument, "reading body: "+err.Error())
	}
	return body, nil
}

// templateSpecOf is the full spec of a stored template: the base a PATCH
// merges into. It never leaves the process (sealed values stay tokens).
func templateSpecOf(t *domain.InstanceTemplate) *InstanceTemplateSpec {
	spec := &InstanceTemplateSpec{
		InstanceTemplate: templateJSON(t), ProviderIDTemplate: t.ProviderIDTemplate,
		HookEnv: t.HookEnv, SecretParameters: tokensJSON(t.SecretParameters),
	}
	if p := t.ParametersJSON; p != "" {
		spec.Parameters = json.RawMessage(p)
	}
	return spec
}

// followPlacement makes a patch that changes zone or instanceType but not
// the parameters carry the change into them: the stored parameters'
// Placement.Zone and InstanceType are dropped so that templateParameters
// fills them from the new values (instead of refusing the disagreement).
// A patch of the offerings of a template with offerings counts as a
// change of both.
func followPlacement(base *InstanceTemplateSpec, patch []byte) {
	var p map[string]json.RawMessage
	if json.Unmarshal(patch, &p) != nil {
		return
	}
	_, zone := p["zone"]
	_, itype := p["instanceType"]
	// New offerings bring their first zone and instance type (the stored
	// ones are the old first offering's).
	if _, ok := p["offerings"]; ok && len(base.Offerings) > 0 {
		if !zone {
			base.Zone, zone = "", true
		}
		if !itype {
			base.InstanceType, itype = "", true
		}
	}
	if len(base.Parameters) == 0 {
		return
	}
	if _, ok := p["parameters"]; ok {
		return
	}
	if !zone && !itype {
		return
	}
	var obj map[string]any
	if json.Unmarshal(base.Parameters, &obj) != nil || obj == nil {
		return
	}
	if placement, ok := obj["Placement"].(map[string]any); ok && zone {
		delete(placement, "Zone")
		if len(placement) == 0 {
			delete(obj, "Placement")
		}
	}
	if itype {
		delete(obj, "InstanceType")
	}
	if b, err := json.Marshal(obj); err == nil {
		base.Parameters = b
	}
}

func (h *handler) patchTemplate(w http.ResponseWriter, r *http.Request) {
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
	body, err := readMergePatch(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	cur, ok := h.svc.CatalogEntry(app.KindTemplates, name)
	if !ok || cur.Entry.Template == nil {
		h.writeError(w, r, newError(http.StatusNotFound, contract.CodeNotFound, "instance template "+strconv.Quote(name)+" is not in the catalog (templates defined inline in a group change with the group)"))
		return
	}
	if rev == 0 {
		rev = cur.Revision
	}
	base := templateSpecOf(cur.Entry.Template)
	followPlacement(base, body)
	spec, err := applyPatch(w, base, body)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	t, err := h.templateRecord(name, spec)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.writeCatalog(w, r, &domain.CatalogEntry{Template: t}, rev, false, app.KindTemplates, name, func() (any, error) {
		v, err := h.svc.Template(name)
		return templateInfo(v), err
	})
}
