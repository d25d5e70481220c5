// Package client is a typed client of the nodesmith API gateway's REST API
// (/api/v1). Errors carry the REST error body's code, message and field;
// HTTP statuses map to sentinel errors (ErrNotFound, ErrConflict, ...)
// usable with errors.Is.
package client

import (
	"errors"
	"net/http"
	"net/url"
)

// Sentinel errors an *APIError matches with errors.Is, by HTTP status.
var (
	ErrBadRequest   = errors.New("bad request")         // 400, 413, 415
	ErrUnauthorized = errors.New("unauthorized")        // 401
	ErrForbidden    = errors.New("forbidden")           // 403
	ErrNotFound     = errors.New("not found")           // 404
	ErrConflict     = errors.New("conflict")            // 409, 412
	ErrUnavailable  = errors.New("service unavailable") // 429, 502, 503, 504
)

// APIError is an error answer of the REST API.
type APIError struct {
	Status  int            // HTTP status
	Code    string         // machine-readable code, e.g. "not_found"
	Message string         // the server's message
	Field   string         // the offending field or parameter, when the server named one
	Details map[string]any // the body's details
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.Field != "" {
		msg += " (field " + e.Field + ")"
	}
	return msg
}

// Client talks to one gateway.
type Client struct {
	base  *url.URL
	http  *http.Client
	token string
}
