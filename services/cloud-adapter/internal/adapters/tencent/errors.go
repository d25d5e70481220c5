package tencent

import (
	"context"
	"errors"
	"strings"

	tcerr "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common/errors"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// This file is the one place Tencent Cloud error codes become the port's
// error kinds. The codes are those of tencentcloud/cvm/v20170312/errors.go,
// Tencent's common error codes, and the SDK's own client-side
// ("ClientError.*") codes. An exact entry wins over a prefix; codes no
// rule knows are ErrorKindUnknown (reported, not retried).

// exactKinds lists codes whose kind differs from what their prefix says.
var exactKinds = map[string]ports.ErrorKind{
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
}

// prefixKinds maps code families, checked in order.
var prefixKinds = []struct {
	prefix string
	kind   ports.ErrorKind
}{
	{"RequestLimitExceeded", ports.ErrorKindThrottled},

	{"ResourceInsufficient", ports.ErrorKindCapacity},
	{"ResourcesSoldOut", ports.ErrorKindCapacity},
	{"LimitExceeded", ports.ErrorKindCapacity},
	{"InstancesQuotaLimitExceeded", ports.ErrorKindCapacity},
	{"ImageQuotaLimitExceeded", ports.ErrorKindCapacity},
	{"OverQuota", ports.ErrorKindCapacity},

	{"AuthFailure", ports.ErrorKindAuth},
	{"UnauthorizedOperation", ports.ErrorKindAuth},
	{"OperationDenied", ports.ErrorKindAuth},
	{"InvalidPermission", ports.ErrorKindAuth},
	{"AccountQualificationRestrictions", ports.ErrorKindAuth},
	{"ClientError.CredentialError", ports.ErrorKindAuth},

	{"InternalError", ports.ErrorKindTransient},
	{"InternalServerError", ports.ErrorKindTransient},
	{"ServiceUnavailable", ports.ErrorKindTransient},
	{"SecGroupActionFailure", ports.ErrorKindTransient},
	{"ClientError.NetworkError", ports.ErrorKindTransient},
	{"ClientError.IOError", ports.ErrorKindTransient},
	{"ClientError.HttpStatusCodeError", ports.ErrorKindTransient},
	{"ClientError.ParseJsonError", ports.ErrorKindTransient},
	{"ClientError.CircuitBreakerError", ports.ErrorKindTransient},

	{"Invalid", ports.ErrorKindInvalidParameters},
	{"MissingParameter", ports.ErrorKindInvalidParameters},
	{"UnknownParameter", ports.ErrorKindInvalidParameters},
	{"UnsupportedOperation", ports.ErrorKindInvalidParameters},
	{"UnsupportedRegion", ports.ErrorKindInvalidParameters},
	{"UnsupportedProtocol", ports.ErrorKindInvalidParameters},
	{"FailedOperation", ports.ErrorKindInvalidParameters},
	{"ResourceNotFound", ports.ErrorKindInvalidParameters},
	{"ResourceUnavailable", ports.ErrorKindInvalidParameters},
	{"ResourceInUse", ports.ErrorKindInvalidParameters},
	{"RegionAbilityLimit", ports.ErrorKindInvalidParameters},
	{"NoSuchVersion", ports.ErrorKindInvalidParameters},
	{"RequestSizeLimitExceeded", ports.ErrorKindInvalidParameters},
	{"DryRunOperation", ports.ErrorKindInvalidParameters},
	{"EniNotAllowedChangeSubnet", ports.ErrorKindInvalidParameters},
	{"VpcAddrNotInSubNet", ports.ErrorKindInvalidParameters},
	{"VpcIpIsUsed", ports.ErrorKindInvalidParameters},
	{"ClientError", ports.ErrorKindInvalidParameters},
}

// goneCodes are Terminate answers meaning "some of these VMs are already
// gone or going": the whole call is refused, so the adapter looks up which
// VMs still need terminating.
var goneCodes = map[string]bool{
	"InvalidInstanceId.NotFound":                    true,
	"UnsupportedOperation.InstanceStateTerminated":  true,
	"UnsupportedOperation.InstanceStateTerminating": true,
}

// kindOf classifies a Tencent Cloud error code.
func kindOf(code string) ports.ErrorKind {
	if k, ok := exactKinds[code]; ok {
		return k
	}
	for _, p := range prefixKinds {
		if code == p.prefix || strings.HasPrefix(code, p.prefix) {
			return p.kind
		}
	}
	return ports.ErrorKindUnknown
}

// mapError turns an SDK error into a *ports.CloudError. When parent (the
// caller's context) has ended, its error is returned instead: that is not
// the cloud's answer.
func mapError(parent context.Context, err error) error {
	if err == nil {
		return nil
	}
	if parent.Err() != nil {
		return parent.Err()
	}
	if _, ok := ports.AsCloudError(err); ok {
		return err // already classified (by the adapter itself)
	}
	var sdk *tcerr.TencentCloudSDKError
	if errors.As(err, &sdk) {
		msg := sdk.Message
		if sdk.RequestId != "" {
			msg += " (request " + sdk.RequestId + ")"
		}
		return ports.NewCloudError(kindOf(sdk.Code), sdk.Code, msg)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ports.NewTransientError("Timeout", err.Error())
	}
	// Anything else comes from the client side of the call (transport,
	// encoding); repeating it is the sensible bounded response.
	return ports.NewTransientError("ClientError", err.Error())
}

func isGone(err error) bool {
	ce, ok := ports.AsCloudError(err)
	return ok && goneCodes[ce.Code]
}
