package ports

import (
	"errors"

	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
)

// ErrorKind is the provider-neutral class of a cloud error, with the one
// retry policy every service follows (contract.ErrorKind). Every adapter
// maps its cloud's error codes to these in one place.
type ErrorKind = contract.ErrorKind

// Error kinds (contract): the zero value is ErrorKindUnknown, a code the
// adapter does not know, definitive (not retried) so it surfaces quickly.
const (
	ErrorKindUnknown           = contract.ErrorKindUnknown
	ErrorKindCapacity          = contract.ErrorKindCapacity
	ErrorKindThrottled         = contract.ErrorKindThrottled
	ErrorKindNotFound          = contract.ErrorKindNotFound
	ErrorKindInvalidParameters = contract.ErrorKindInvalidParameters
	ErrorKindAuth              = contract.ErrorKindAuth
	ErrorKindTransient         = contract.ErrorKindTransient
)

// CloudError is the one shape of every error a Cloud returns about the
// cloud's answer (domain.CloudError, the shape events report failures in).
type CloudError = domain.CloudError

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
func IsRetryable(err error) bool { return KindOf(err).Retryable() }

func isKind(err error, k ErrorKind) bool {
	ce, ok := AsCloudError(err)
	return ok && ce.Kind == k
}
