package cvmemu

import "fmt"

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

// apiError is an error answered in the Tencent Cloud error shape.
type apiError struct {
	Code    string
	Message string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func errf(code, format string, args ...any) *apiError {
	return &apiError{Code: code, Message: fmt.Sprintf(format, args...)}
}
