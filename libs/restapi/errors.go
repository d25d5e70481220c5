package restapi

// ErrorBody is every error response: a stable machine-readable code (the
// lower snake gRPC code name, e.g. "not_found"), a message for people, and
// details (an object, possibly empty; "field" or "parameter" names the
// bad input).
type ErrorBody struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}
