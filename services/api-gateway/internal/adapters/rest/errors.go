package rest

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// apiError is an error with its HTTP status and details.
type apiError struct {
	status  int
	code    domain.Code
	message string
	details map[string]any
}

func (e *apiError) Error() string { return e.message }

func newError(status int, code domain.Code, msg string) *apiError {
	return &apiError{status: status, code: code, message: msg}
}

func (e *apiError) with(k string, v any) *apiError {
	if e.details == nil {
		e.details = map[string]any{}
	}
	e.details[k] = v
	return e
}

// httpStatus maps an application error code to an HTTP status.
func httpStatus(c domain.Code) int { return c.HTTPStatus() }

// writeError writes err as an ErrorBody. Errors that are not *apiError or
// *domain.Error are internal: their text stays in the log.
func (h *handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	var de *domain.Error
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &de):
		ae = &apiError{status: httpStatus(de.Code), code: de.Code, message: de.Error()}
	default:
		code := domain.CodeOf(err)
		if code == contract.CodeUnknown {
			h.log.ErrorContext(r.Context(), "internal error serving REST request", "method", r.Method, "path", r.URL.Path, "err", err)
			ae = newError(http.StatusInternalServerError, contract.CodeInternal, "internal error")
		} else {
			ae = newError(httpStatus(code), code, domain.MessageOf(err))
		}
	}
	details := ae.details
	if details == nil {
		details = map[string]any{}
	}
	writeJSON(w, ae.status, ErrorBody{Code: ae.code.String(), Message: ae.message, Details: details})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
