package rest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/libs/restapi"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// The write documents (groups, templates, hooks, accounts) are decoded and
// checked by libs/restapi, which lifecycle's configuration file loader
// uses too: the same names, the same shape rules, the same field paths.
// This adapter adds what needs the catalog or a key (references, provider
// parameters, sealing) and Kubernetes quantities.

// decodeSpec reads a write document into v. Deprecated field names are
// accepted; each use adds a Warning header (as Kubernetes answers a
// deprecated API) naming the field and its replacement.
func decodeSpec(w http.ResponseWriter, r *http.Request, v any) error {
	var raw json.RawMessage
	if err := decodeJSON(r, &raw); err != nil {
		return err
	}
	warnings, err := restapi.Decode(raw, v, restapi.DecodeOptions{})
	addWarnings(w, warnings)
	return specError(err)
}

// addWarnings adds one Warning header (code 299, agent "-") per warning.
func addWarnings(w http.ResponseWriter, warnings []restapi.Warning) {
	for _, x := range warnings {
		addWarning(w, x.String())
	}
}

// addWarning adds one Warning header (code 299, agent "-") saying text.
func addWarning(w http.ResponseWriter, text string) {
	w.Header().Add("Warning", fmt.Sprintf("299 - %q", text))
}

// specError turns restapi's errors into a 400 naming the first field in
// details.field and every problem in details.errors.
func specError(err error) error {
	var fe restapi.FieldErrors
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe) && len(fe) > 0:
		return newError(http.StatusBadRequest, contract.CodeInvalidArgument, fe.Error()).
			with("field", fe[0].Field).with("errors", []restapi.FieldError(fe))
	}
	return newError(http.StatusBadRequest, contract.CodeInvalidArgument, "invalid request body: "+err.Error())
}

// validateSpec is specError of a document's Validate.
func validateSpec(errs restapi.FieldErrors) error {
	if len(errs) == 0 {
		return nil
	}
	return specError(errs)
}

// onFailureOf is the record's value of a validated onFailure.
func onFailureOf(s string) domain.OnFailure {
	switch v, _ := restapi.OnFailureOf(s); v {
	case restapi.OnFailureContinue:
		return domain.OnFailureContinue
	case restapi.OnFailureBlock:
		return domain.OnFailureBlock
	}
	return domain.OnFailureUnspecified
}

// onFailureName is the one documented spelling of a record's onFailure
// ("" when unset).
func onFailureName(f domain.OnFailure) string {
	switch f {
	case domain.OnFailureContinue:
		return restapi.OnFailureContinue
	case domain.OnFailureBlock:
		return restapi.OnFailureBlock
	}
	return ""
}
