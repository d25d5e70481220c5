package ports

import (
	"errors"
	"fmt"
)

// ErrorKind is the provider-neutral class of a cloud error. Every adapter
// maps its cloud's error codes to these in one place.
type ErrorKind int

// Error kinds. The zero value is ErrorKindUnknown: a code the adapter does
// not know, treated as definitive (not retried) so it surfaces quickly.
const (
	ErrorKindUnknown ErrorKind = iota
	// ErrorKindCapacity: out of capacity, quota or stock (CA's
	// OutOfResources class): retrying the same request soon will not help.
	ErrorKindCapacity
	// ErrorKindThrottled: the cloud's rate limit; retried with backoff.
	ErrorKindThrottled
	// ErrorKindNotFound: the resource does not exist (or no longer).
	ErrorKindNotFound
	// ErrorKindInvalidParameters: the request (usually the template) is wrong.
	ErrorKindInvalidParameters
	// ErrorKindAuth: missing, wrong or insufficient credentials.
	ErrorKindAuth
	// ErrorKindTransient: timeouts, 5xx, connection errors; retried.
	ErrorKindTransient
)

func (k ErrorKind) String() string {
	switch k {
	case ErrorKindCapacity:
		return "capacity"
	case ErrorKindThrottled:
		return "throttled"
	case ErrorKindNotFound:
		return "not_found"
	case ErrorKindInvalidParameters:
		return "invalid_parameters"
	case ErrorKindAuth:
		return "auth"
	case ErrorKindTransient:
		return "transient"
	default:
		return "unknown"
	}
}

// CloudError is the one shape of every error a Cloud returns about the
// cloud's answer. Code is the cloud's own code (e.g.
// "ResourceInsufficient.SpecifiedInstanceType"), kept for operators and for
// CA's error message.
type CloudError struct {
	Kind    ErrorKind
	Code    string
	Message string
}

func (e *CloudError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("cloud error %s (%s)", e.Code, e.Kind)
	}
	return fmt.Sprintf("cloud error %s (%s): %s", e.Code, e.Kind, e.Message)
}

// NewCloudError returns a CloudError of kind.
func NewCloudError(kind ErrorKind, code, message string) *CloudError {
	return &CloudError{Kind: kind, Code: code, Message: message}
}

// NewCapacityError reports missing capacity, quota or stock.
func NewCapacityError(code, message string) *CloudError {
	return NewCloudError(ErrorKindCapacity, code, message)
}

// NewThrottledError reports the cloud's rate limit.
func NewThrottledError(code, message string) *CloudError {
	return NewCloudError(ErrorKindThrottled, code, message)
}

// NewNotFoundError reports a missing resource.
func NewNotFoundError(code, message string) *CloudError {
	return NewCloudError(ErrorKindNotFound, code, message)
}

// NewInvalidParametersError reports a request the cloud rejects as wrong.
func NewInvalidParametersError(code, message string) *CloudError {
	return NewCloudError(ErrorKindInvalidParameters, code, message)
}

// NewAuthError reports missing or rejected credentials.
func NewAuthError(code, message string) *CloudError {
	return NewCloudError(ErrorKindAuth, code, message)
}

// NewTransientError reports a failure worth retrying.
func NewTransientError(code, message string) *CloudError {
	return NewCloudError(ErrorKindTransient, code, message)
}

// AsCloudError returns the CloudError in err's chain, if any.
func AsCloudError(err error) (*CloudError, bool) {
	var ce *CloudError
	if errors.As(err, &ce) {
		return ce, true
	}
	return nil, false
}

// KindOf returns the kind of the CloudError in err's chain, or
// ErrorKindUnknown.
func KindOf(err error) ErrorKind {
	if ce, ok := AsCloudError(err); ok {
		return ce.Kind
	}
	return ErrorKindUnknown
}

// IsCapacityError reports whether err is out of capacity, quota or stock.
func IsCapacityError(err error) bool { return isKind(err, ErrorKindCapacity) }

// IsThrottledError reports whether err is the cloud's rate limit.
func IsThrottledError(err error) bool { return isKind(err, ErrorKindThrottled) }

// IsNotFoundError reports whether err is a missing resource.
func IsNotFoundError(err error) bool { return isKind(err, ErrorKindNotFound) }

// IsInvalidParametersError reports whether err is a rejected request.
func IsInvalidParametersError(err error) bool { return isKind(err, ErrorKindInvalidParameters) }

// IsAuthError reports whether err is a credentials problem.
func IsAuthError(err error) bool { return isKind(err, ErrorKindAuth) }

// IsTransientError reports whether err is a transient failure.
func IsTransientError(err error) bool { return isKind(err, ErrorKindTransient) }

// IsRetryable reports whether the same call may succeed if simply repeated
// later: throttling and transient failures.
func IsRetryable(err error) bool {
	k := KindOf(err)
	return k == ErrorKindThrottled || k == ErrorKindTransient
}

func isKind(err error, k ErrorKind) bool {
	ce, ok := AsCloudError(err)
	return ok && ce.Kind == k
}
