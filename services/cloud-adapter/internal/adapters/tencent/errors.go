package tencent

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	tcerr "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common/errors"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/cloudcall"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// This file is the one place Tencent Cloud error codes become the port's
// error kinds. The codes are those of tencentcloud/cvm/v20170312/errors.go,
// Tencent's common error codes, and the SDK's own client-side
// ("ClientError.*") codes. An exact entry wins over a prefix; codes no
// rule knows are ErrorKindUnknown (reported, not retried).

// exactKinds lists codes whose kind differs from what their prefix says.
var codes = cloudcall.Codes{Exact: map[string]ports.ErrorKind{
	"InvalidInstanceId.NotFound": ports.ErrorKindNotFound,
	// Terminating a VM that is already gone.
	"UnsupportedOperation.InstanceStateTerminated": ports.ErrorKindNotFound,

	// Out of capacity, quota, stock or money although the prefix says
	// "invalid": CA must back off the group, not fix a template.
	"InvalidAccount.InsufficientBalance":                 ports.ErrorKindCapacity,
	"InvalidAccount.UnpaidOrder":                         ports.ErrorKindCapacity,
	"InvalidParameterValue.InsufficientOffering":         ports.ErrorKindCapacity,
	"InvalidParameter.InvalidCloudDiskSoldOut":           ports.ErrorKindCapacity,
	"InvalidParameterValue.TagQuotaLimitExceeded":        ports.ErrorKindCapacity,
	"InvalidParameterValue.ExternalIpQuotaLimited":       ports.ErrorKindCapacity,
	"FailedOperation.NoAvailableIpAddressCountInSubnet":  ports.ErrorKindCapacity,
	"ResourceUnavailable.InstanceType":                   ports.ErrorKindCapacity,
	"UnsupportedOperation.InsufficientClusterQuota":      ports.ErrorKindCapacity,
	"UnsupportedOperation.ReservedInstanceOutofQuata":    ports.ErrorKindCapacity,
	"UnsupportedOperation.UserLimitOperationExceedQuota": ports.ErrorKindCapacity,

	// A limit of the request itself, not of the account; and templates
	// asking for something the account may do, just not this way.
	"LimitExceeded.InstanceTypeBandwidth":                      ports.ErrorKindInvalidParameters,
	"OperationDenied.ChcInstallCloudImageWithoutDeployNetwork": ports.ErrorKindInvalidParameters,
	"OperationDenied.NotBandwidthShiftUpUserApplyEdgeZoneEip":  ports.ErrorKindInvalidParameters,

	// The VM is busy with another operation: the same call works later.
	"OperationDenied.InstanceOperationInProgress": ports.ErrorKindTransient,
	"MutexOperation.TaskRunning":                  ports.ErrorKindTransient,
	"FailedOperation.InquiryPriceFailed":          ports.ErrorKindTransient,
	"UnsupportedOperation.InstanceStatePending":   ports.ErrorKindTransient,
	"UnsupportedOperation.InstanceStateStarting":  ports.ErrorKindTransient,
	"UnsupportedOperation.InstanceStateStopping":  ports.ErrorKindTransient,
	"UnsupportedOperation.InstanceStateRebooting": ports.ErrorKindTransient,
},
	// Code families, checked in order.
	Prefixes: []cloudcall.Prefix{
		{Prefix: "RequestLimitExceeded", Kind: ports.ErrorKindThrottled},

		{Prefix: "ResourceInsufficient", Kind: ports.ErrorKindCapacity},
		{Prefix: "ResourcesSoldOut", Kind: ports.ErrorKindCapacity},
		{Prefix: "LimitExceeded", Kind: ports.ErrorKindCapacity},
		{Prefix: "InstancesQuotaLimitExceeded", Kind: ports.ErrorKindCapacity},
		{Prefix: "ImageQuotaLimitExceeded", Kind: ports.ErrorKindCapacity},
		{Prefix: "OverQuota", Kind: ports.ErrorKindCapacity},

		{Prefix: "AuthFailure", Kind: ports.ErrorKindAuth},
		{Prefix: "UnauthorizedOperation", Kind: ports.ErrorKindAuth},
		{Prefix: "OperationDenied", Kind: ports.ErrorKindAuth},
		{Prefix: "InvalidPermission", Kind: ports.ErrorKindAuth},
		{Prefix: "AccountQualificationRestrictions", Kind: ports.ErrorKindAuth},
		{Prefix: "ClientError.CredentialError", Kind: ports.ErrorKindAuth},

		{Prefix: "InternalError", Kind: ports.ErrorKindTransient},
		{Prefix: "InternalServerError", Kind: ports.ErrorKindTransient},
		{Prefix: "ServiceUnavailable", Kind: ports.ErrorKindTransient},
		{Prefix: "SecGroupActionFailure", Kind: ports.ErrorKindTransient},
		{Prefix: "ClientError.NetworkError", Kind: ports.ErrorKindTransient},
		{Prefix: "ClientError.IOError", Kind: ports.ErrorKindTransient},
		{Prefix: "ClientError.HttpStatusCodeError", Kind: ports.ErrorKindTransient},
		{Prefix: "ClientError.ParseJsonError", Kind: ports.ErrorKindTransient},
		{Prefix: "ClientError.CircuitBreakerError", Kind: ports.ErrorKindTransient},

		{Prefix: "Invalid", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "MissingParameter", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "UnknownParameter", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "UnsupportedOperation", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "UnsupportedRegion", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "UnsupportedProtocol", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "FailedOperation", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "ResourceNotFound", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "ResourceUnavailable", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "ResourceInUse", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "RegionAbilityLimit", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "NoSuchVersion", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "RequestSizeLimitExceeded", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "DryRunOperation", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "EniNotAllowedChangeSubnet", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "VpcAddrNotInSubNet", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "VpcIpIsUsed", Kind: ports.ErrorKindInvalidParameters},
		{Prefix: "ClientError", Kind: ports.ErrorKindInvalidParameters},
	}}

// goneCodes are Terminate answers meaning "some of these VMs are already
// gone or going": the whole call is refused, so the adapter looks up which
// VMs still need terminating.
var goneCodes = cloudcall.CodeSet{
	"InvalidInstanceId.NotFound":                    true,
	"UnsupportedOperation.InstanceStateTerminated":  true,
	"UnsupportedOperation.InstanceStateTerminating": true,
}

// kindOf classifies a Tencent Cloud error code.
func kindOf(code string) ports.ErrorKind { return codes.Kind(code) }

// classify reads a Tencent Cloud answer out of an SDK error.
func classify(err error) (*ports.CloudError, bool) {
	var sdk *tcerr.TencentCloudSDKError
	if !errors.As(err, &sdk) {
		return nil, false
	}
	msg := sdk.Message
	if sdk.RequestId != "" {
		msg += " (request " + sdk.RequestId + ")"
	}
	return ports.NewCloudError(kindOf(sdk.Code), sdk.Code, msg), true
}

// leadingCode is an error code at the start of a LatestOperationErrorMsg
// ("ResourceInsufficient.SpecifiedInstanceType: ...").
var leadingCode = regexp.MustCompile(`^([A-Z][A-Za-z0-9]*(?:\.[A-Za-z0-9]+)+)\b`)

// capacityWords say "out of stock" in a LatestOperationErrorMsg that names
// no known code (the console's messages are English or Chinese).
var capacityWords = []string{"sold out", "soldout", "insufficient", "out of stock", "no stock", "nostock", "库存", "售罄", "资源不足"}

// launchError classifies why a VM ended LAUNCH_FAILED, from its
// LatestOperationErrorMsg: a Tencent error code the message starts with
// decides, else words meaning "out of stock" make it a capacity error; nil
// when the cloud gives no reason.
func launchError(msg, zone, instanceType string) *domain.LaunchError {
	msg = strings.TrimSpace(msg)
	if msg == "" {
		return nil
	}
	le := &domain.LaunchError{Message: fmt.Sprintf("launch failed in zone %s, instance type %s: %s", orUnset(zone), orUnset(instanceType), msg)}
	if m := leadingCode.FindStringSubmatch(msg); m != nil {
		if k := kindOf(m[1]); k != ports.ErrorKindUnknown {
			le.Code, le.Kind = m[1], k
			return le
		}
	}
	lower := strings.ToLower(msg)
	for _, w := range capacityWords {
		if strings.Contains(lower, w) {
			le.Kind = ports.ErrorKindCapacity
			break
		}
	}
	return le
}
