package contract

import "fmt"

// Code classifies an operation error: the one set of codes lifecycle
// answers with and the gateway passes on. The values are the canonical gRPC
// status codes (google.rpc.Code), so a code travels unchanged through
// lifecycle's Reply.error.code and converts to a gRPC status by a plain
// conversion; HTTPStatus maps it for REST in this one place.
type Code uint32

// Codes, numbered as google.rpc.Code. The zero value is CodeOK.
const (
	CodeOK       Code = 0
	CodeCanceled Code = 1
	// CodeUnknown: an error nobody classified; services answer it as
	// Internal and treat it as not final (nothing is known to be applied).
	CodeUnknown Code = 2
	// CodeInvalidArgument: the request itself is wrong.
	CodeInvalidArgument  Code = 3
	CodeDeadlineExceeded Code = 4
	// CodeNotFound: the group, instance or node does not exist.
	CodeNotFound Code = 5
	// CodeAlreadyExists: creating something that exists.
	CodeAlreadyExists     Code = 6
	CodePermissionDenied  Code = 7
	CodeResourceExhausted Code = 8
	// CodeFailedPrecondition: the request is valid but the current state
	// does not allow it.
	CodeFailedPrecondition Code = 9
	// CodeAborted: a concurrent write won; retrying the call may succeed.
	CodeAborted Code = 10
	// CodeOutOfRange: the result would leave [minSize, maxSize].
	CodeOutOfRange    Code = 11
	CodeUnimplemented Code = 12
	CodeInternal      Code = 13
	// CodeUnavailable: storage, messaging or a peer is down; retry later.
	CodeUnavailable     Code = 14
	CodeDataLoss        Code = 15
	CodeUnauthenticated Code = 16
)

var codeNames = [...]string{
	"ok", "canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found",
	"already_exists", "permission_denied", "resource_exhausted", "failed_precondition",
	"aborted", "out_of_range", "unimplemented", "internal", "unavailable", "data_loss",
	"unauthenticated",
}

// NumCodes is the number of codes; valid codes are 0 to NumCodes-1.
const NumCodes = len(codeNames)

// String is the lower snake name of the code ("not_found"), used in REST
// errors.
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("code_%d", uint32(c))
}

// HTTPStatus maps the code to an HTTP status (numbers, so this package stays
// free of net/http).
func (c Code) HTTPStatus() int {
	switch c {
	case CodeOK:
		return 200
	case CodeInvalidArgument, CodeOutOfRange:
		return 400 // Bad Request
	case CodeUnauthenticated:
		return 401 // Unauthorized
	case CodePermissionDenied:
		return 403 // Forbidden
	case CodeNotFound:
		return 404 // Not Found
	case CodeAlreadyExists, CodeAborted, CodeFailedPrecondition:
		// FailedPrecondition from lifecycle means "not in a state that
		// allows this" (a conflict with the resource's state).
		return 409 // Conflict
	case CodeResourceExhausted:
		return 429 // Too Many Requests
	case CodeCanceled:
		return 499 // client closed the request (nginx convention)
	case CodeUnimplemented:
		return 501 // Not Implemented
	case CodeUnavailable:
		return 503 // Service Unavailable
	case CodeDeadlineExceeded:
		return 504 // Gateway Timeout
	}
	return 500 // Internal Server Error
}
