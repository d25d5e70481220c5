package alibaba

import (
	"errors"
	"strconv"

	"github.com/alibabacloud-go/tea/tea"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/cloudcall"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// This file is the one place Alibaba Cloud ECS error codes become the
// port's error kinds: the codes of RunInstances, DescribeInstances and
// DeleteInstances in the ECS API reference and the OpenAPI gateway's
// common codes (signature, throttling, service). An exact entry wins over
// a prefix; a code no rule knows is ErrorKindUnknown (reported, not
// retried) unless the HTTP status was 5xx (transient).

var codes = cloudcall.Codes{
	Exact: map[string]ports.ErrorKind{
		"InvalidInstanceId.NotFound": ports.ErrorKindNotFound,
		"InvalidInstanceId.NotExist": ports.ErrorKindNotFound,
		// TagResources on an instance that does not exist.
		"InvalidResourceId.NotFound": ports.ErrorKindNotFound,

		// Out of stock in the zone (OperationDenied.NoStock*: a prefix
		// below), or the type is not sold there: CA must back off the group
		// (OutOfResources), not fix a template.
		"InvalidResourceType.NotSupported":           ports.ErrorKindCapacity,
		"Zone.NotOnSale":                             ports.ErrorKindCapacity,
		"Zone.NotOpen":                               ports.ErrorKindCapacity,
		"InvalidZoneId.NotOnSale":                    ports.ErrorKindCapacity,
		"ResourceNotAvailable":                       ports.ErrorKindCapacity,
		"OperationDenied.ZoneNotAllowed":             ports.ErrorKindCapacity,
		"OperationDenied.ZoneSystemCategoryNotMatch": ports.ErrorKindCapacity,
		"InvalidVSwitchId.IpNotEnough":               ports.ErrorKindCapacity,
		"InvalidVSwitch.IpNotEnough":                 ports.ErrorKindCapacity,
		// Money: the account cannot pay for more VMs now.
		"InvalidAccountStatus.NotEnoughBalance": ports.ErrorKindCapacity,
		"Account.Arrearage":                     ports.ErrorKindCapacity,
		"InvalidPayMethod":                      ports.ErrorKindCapacity,

		// The VM or the token is busy with another operation: the same call
		// works later.
		"IncorrectInstanceStatus":              ports.ErrorKindTransient,
		"IncorrectInstanceStatus.Initializing": ports.ErrorKindTransient,
		"OperationConflict":                    ports.ErrorKindTransient,
		"LastTokenProcessing":                  ports.ErrorKindTransient,
		"IdempotentProcessing":                 ports.ErrorKindTransient,
		"SignatureNonceUsed":                   ports.ErrorKindTransient, // a retry signs with a new nonce

		// The same ClientToken with other parameters: a bug, not a retry.
		"IdempotentParameterMismatch": ports.ErrorKindInvalidParameters,

		"SignatureDoesNotMatch":                      ports.ErrorKindAuth,
		"IncompleteSignature":                        ports.ErrorKindAuth,
		"InvalidTimeStamp.Expired":                   ports.ErrorKindAuth, // clock skew: an operator must fix it
		"NoPermission":                               ports.ErrorKindAuth,
		"InvalidSecurityToken.Expired":               ports.ErrorKindAuth,
		"InvalidSecurityToken.Malformed":             ports.ErrorKindAuth,
		"InvalidSecurityToken.MismatchWithAccessKey": ports.ErrorKindAuth,
		"InvalidApi.NotPurchase":                     ports.ErrorKindAuth,
		"InvalidUser.Unauthorized":                   ports.ErrorKindAuth,
	},
	Prefixes: []cloudcall.Prefix{
		{Prefix: "Throttling", Kind: ports.ErrorKindThrottled},
		{Prefix: "ServiceUnavailable", Kind: ports.ErrorKindTransient},
		{Prefix: "InternalError", Kind: ports.ErrorKindTransient},
		{Prefix: "UnknownError", Kind: ports.ErrorKindTransient},
		{Prefix: "RequestTimeout", Kind: ports.ErrorKindTransient},

		{Prefix: "QuotaExceed", Kind: ports.ErrorKindCapacity},
		{Prefix: "QuotaExceeded", Kind: ports.ErrorKindCapacity},
		{Prefix: "OperationDenied.NoStock", Kind: ports.ErrorKindCapacity},
		{Prefix: "OperationDenied.QuotaExceed", Kind: ports.ErrorKindCapacity},

		{Prefix: "InvalidAccessKeyId", Kind: ports.ErrorKindAuth},
		{Prefix: "InvalidAccessKeySecret", Kind: ports.ErrorKindAuth},
		{Prefix: "InvalidSecurityToken", Kind: ports.ErrorKindAuth},
		{Prefix: "Forbidden", Kind: ports.ErrorKindAuth},
		{Prefix: "InvalidCredentials", Kind: ports.ErrorKindAuth}, // the SDK's own: no key at all
		{Prefix: "InvalidAccountStatus", Kind: ports.ErrorKindAuth},

		{Prefix: "InvalidParameter", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "MissingParameter", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "Missing", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "Invalid", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "OperationDenied", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "IncorrectVSwitchStatus", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "DependencyViolation", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "UnsupportedOperation", Kind: ports.ErrorKindInvalidParameters},
	},
}

// goneCodes are DeleteInstances answers meaning "some of these VMs are
// already gone or being released": the whole call is refused, so the
// adapter looks up which VMs still need deleting.
var goneCodes = cloudcall.CodeSet{
	"InvalidInstanceId.NotFound": true,
	"InvalidInstanceId.NotExist": true,
	"IncorrectInstanceStatus":    true,
}

// classify reads an ECS answer out of an SDK error: the SDK reports every
// answer it could parse as a *tea.SDKError with the code and HTTP status.
func classify(err error) (*ports.CloudError, bool) {
	var sdk *tea.SDKError
	if !errors.As(err, &sdk) {
		return nil, false
	}
	code := tea.StringValue(sdk.Code)
	status := tea.IntValue(sdk.StatusCode)
	kind := codes.Kind(code)
	switch {
	case kind != ports.ErrorKindUnknown:
	case status >= 500:
		kind = ports.ErrorKindTransient
	case status == 429:
		kind = ports.ErrorKindThrottled
	}
	if code == "" {
		code = "HTTPStatus" + strconv.Itoa(status)
	}
	// The SDK's message already carries the status and the request id.
	return ports.NewCloudError(kind, code, tea.StringValue(sdk.Message)), true
}
