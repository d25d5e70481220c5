package cvmemu

import (
	"fmt"
	"time"
)

// Error codes answered by the emulator. They are the codes the real API uses
// (see tencentcloud/cvm/v20170312/errors.go and the common error code list),
// so client code can switch on the same strings.
const (
	CodeAuthSignatureFailure     = "AuthFailure.SignatureFailure"
	CodeAuthSignatureExpire      = "AuthFailure.SignatureExpire"
	CodeAuthSecretIDNotFound     = "AuthFailure.SecretIdNotFound"
	CodeAuthInvalidAuthorization = "AuthFailure.InvalidAuthorization"
	CodeAuthTokenFailure         = "AuthFailure.TokenFailure"

	CodeInternalError            = "InternalError"
	CodeInvalidAction            = "InvalidAction"
	CodeNoSuchVersion            = "NoSuchVersion"
	CodeMissingParameter         = "MissingParameter"
	CodeUnknownParameter         = "UnknownParameter"
	CodeInvalidParameter         = "InvalidParameter"
	CodeInvalidParameterValue    = "InvalidParameterValue"
	CodeUnsupportedProtocol      = "UnsupportedProtocol"
	CodeUnsupportedRegion        = "UnsupportedRegion"
	CodeRequestSizeLimitExceeded = "RequestSizeLimitExceeded"
	CodeRequestLimitExceeded     = "RequestLimitExceeded"
	CodeDryRunOperation          = "DryRunOperation"

	CodeParamValueLimitExceeded  = "InvalidParameterValue.LimitExceeded"
	CodeParamValueRange          = "InvalidParameterValue.Range"
	CodeParamValueDuplicateTags  = "InvalidParameterValue.DuplicateTags"
	CodeParamValueZoneNotSupport = "InvalidParameterValue.ZoneNotSupported"
	CodeInvalidFilter            = "InvalidFilter"
	CodeFilterValueLimitExceeded = "InvalidFilterValue.LimitExceeded"
	CodeIllegalTagKey            = "FailedOperation.IllegalTagKey"
	CodeClientTokenTooLong       = "InvalidClientToken.TooLong"
	CodeInstanceNameTooLong      = "InvalidInstanceName.TooLong"
	CodeZoneMismatchRegion       = "InvalidZone.MismatchRegion"

	CodeInstanceIDMalformed       = "InvalidInstanceId.Malformed"
	CodeInstanceIDNotFound        = "InvalidInstanceId.NotFound"
	CodeInstanceStateTerminating  = "UnsupportedOperation.InstanceStateTerminating"
	CodeInstanceQuota             = "LimitExceeded.InstanceQuota"
	CodeInsufficientInstanceType  = "ResourceInsufficient.SpecifiedInstanceType"
	CodeSoldOutInstanceType       = "ResourcesSoldOut.SpecifiedInstanceType"
	CodeInsufficientAvailableZone = "ResourceInsufficient.AvailabilityZoneSoldOut"
	CodeZoneSoldOutForType        = "ResourceInsufficient.ZoneSoldOutForSpecifiedInstance"
)

// apiError is an API error, rendered in its front end's error shape.
type apiError struct {
	Code    string
	Message string
	// Status is the HTTP status of the ECS front end's answer; 0 derives
	// it from the code. The CVM front end always answers 200.
	Status int
	// rateLimit, for an ECS throttling error, is the limit (requests per
	// second) and how long until the next request is admitted, sent in
	// x-ratelimit-user-api as the real gateway does (the SDK's
	// ThrottlingError.RetryAfter).
	rateLimit float64
	retryIn   time.Duration
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func errf(code, format string, args ...any) *apiError {
	return &apiError{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (f *Fault) apiError() *apiError {
	return &apiError{Code: f.Code, Message: f.Message, Status: f.HTTPStatus}
}
