package cvmemu

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// The ECS front end: the Alibaba Cloud ECS API (version 2014-05-26) in RPC
// style, as the official SDK github.com/alibabacloud-go/ecs-20140526 sends
// it: parameters in the query (or a form body), Action and Version in the
// x-acs-action and x-acs-version headers (or the Action and Version
// parameters), ACS3-HMAC-SHA256 signatures (ecsauth.go), JSON answers and
// errors {"RequestId","HostId","Code","Message","Recommend"} with the real
// HTTP statuses. It serves the same core as the CVM front end: VMs,
// accounts, quotas, stock-outs, SSH guests, cluster joins and the state
// file are shared; each front end sees only the VMs it created and
// remembers its own ClientTokens, and rate limits and faults can be set
// for it alone (APIECS) so its clients get ECS's codes.

// ECS API identity.
const (
	ECSAPIVersion = "2014-05-26"
)

// ECS actions the emulator implements. RunInstances and DescribeInstances
// share their names (and so their rate limits and faults) with CVM's.
const (
	ActionDeleteInstances        = "DeleteInstances"
	ActionDescribeInstanceStatus = "DescribeInstanceStatus"
	ActionTagResources           = "TagResources"
)

// ECSActions lists every implemented ECS action.
var ECSActions = []string{ActionRunInstances, ActionDescribeInstances, ActionDeleteInstances,
	ActionDescribeInstanceStatus, ActionTagResources, ActionDescribeInstanceTypes, ActionDescribeAvailableResource}

// ECS instance statuses, as in DescribeInstances' Status field.
const (
	ECSStatusPending  = "Pending"
	ECSStatusStarting = "Starting"
	ECSStatusRunning  = "Running"
	ECSStatusStopping = "Stopping"
	ECSStatusStopped  = "Stopped"
)

// ECS error codes (the real ones, see the ECS API error center).
const (
	ecsCodeIncompleteSignature     = "IncompleteSignature"
	ecsCodeSignatureMismatch       = "SignatureDoesNotMatch"
	ecsCodeAccessKeyNotFound       = "InvalidAccessKeyId.NotFound"
	ecsCodeInvalidTimeStampFormat  = "InvalidTimeStamp.Format"
	ecsCodeInvalidTimeStampExpired = "InvalidTimeStamp.Expired"
	ecsCodeSignatureNonceUsed      = "SignatureNonceUsed"
	ecsCodeMissingNonce            = "MissingSignatureNonce"
	ecsCodeSecurityTokenMalformed  = "InvalidSecurityToken.Malformed"

	ECSCodeThrottling             = "Throttling.User"
	ECSCodeNoStock                = "OperationDenied.NoStock"
	ECSCodeResourceNotSupported   = "InvalidResourceType.NotSupported"
	ECSCodeQuota                  = "QuotaExceed.ElasticQuota"
	ECSCodeIdempotentMismatch     = "IdempotentParameterMismatch"
	ECSCodeIncorrectStatus        = "IncorrectInstanceStatus"
	ECSCodeInstanceNotFound       = "InvalidInstanceId.NotFound"
	ECSCodeServiceUnavailable     = "ServiceUnavailable"
	ecsCodeInvalidAction          = "InvalidAction.NotFound"
	ecsCodeInvalidVersion         = "InvalidVersion"
	ecsCodeMissingParameter       = "MissingParameter"
	ecsCodeInvalidParameter       = "InvalidParameter"
	ecsCodeRegionNotFound         = "InvalidRegionId.NotFound"
	ecsCodeZoneNotFound           = "InvalidZoneId.NotFound"
	ecsCodeInstanceIDsMalformed   = "InvalidInstanceIds.Malformed"
	ecsCodeDryRun                 = "DryRunOperation"
	ecsCodeTagKeyMalformed        = "InvalidTagKey.Malformed"
	ecsCodeTagValueMalformed      = "InvalidTagValue.Malformed"
	ecsCodeTagKeyDuplicated       = "InvalidParameter.TagKeyDuplicated"
	ecsCodeTagCountExceeded       = "InvalidTagCount"
	ecsCodeResourceIDNotFound     = "InvalidResourceId.NotFound"
	ecsCodeResourceTypeNotFound   = "InvalidResourceType.NotFound"
	ecsCodeNextTokenMalformed     = "InvalidParameter.NextToken"
	ecsCodeChargeTypeNotSupported = "InvalidInstanceChargeType.ValueNotSupported"
	ecsCodeSpotStrategyInvalid    = "InvalidSpotStrategy"
	ecsCodeVSwitchNotFound        = "InvalidVSwitchId.NotFound"
	ecsCodeClientTokenMalformed   = "InvalidClientToken.ValueNotSupported"
	ecsCodeRequestTooLarge        = "RequestTooLarge"
)

// ecsStatus is the HTTP status the real API answers with each code.
var ecsStatus = map[string]int{
	ecsCodeAccessKeyNotFound:    http.StatusNotFound,
	ecsCodeInvalidAction:        http.StatusNotFound,
	ecsCodeRegionNotFound:       http.StatusNotFound,
	ecsCodeZoneNotFound:         http.StatusNotFound,
	ECSCodeInstanceNotFound:     http.StatusNotFound,
	ecsCodeResourceIDNotFound:   http.StatusNotFound,
	ecsCodeVSwitchNotFound:      http.StatusNotFound,
	ECSCodeNoStock:              http.StatusForbidden,
	ECSCodeResourceNotSupported: http.StatusForbidden,
	ECSCodeQuota:                http.StatusForbidden,
	ECSCodeIncorrectStatus:      http.StatusForbidden,
	CodeInternalError:           http.StatusInternalServerError,
	ECSCodeServiceUnavailable:   http.StatusServiceUnavailable,
	ecsCodeRequestTooLarge:      http.StatusRequestEntityTooLarge,
	// Real codes the emulator never answers by itself, for injected faults.
	"InvalidAccessKeySecret":      http.StatusBadRequest,
	"Forbidden.RAM":               http.StatusForbidden,
	"InvalidAccessKeyId.Inactive": http.StatusForbidden,
}

// statusOf returns the HTTP status for an ECS error: the explicit one, the
// code's, or by pattern as the real API groups them (400 otherwise).
func statusOf(aerr *apiError) int {
	if aerr.Status != 0 {
		return aerr.Status
	}
	if s, ok := ecsStatus[aerr.Code]; ok {
		return s
	}
	switch {
	case strings.HasSuffix(aerr.Code, ".NotFound"):
		return http.StatusNotFound
	case strings.HasPrefix(aerr.Code, "OperationDenied"), strings.HasPrefix(aerr.Code, "Forbidden"),
		strings.HasPrefix(aerr.Code, "QuotaExceed"):
		return http.StatusForbidden
	case strings.HasPrefix(aerr.Code, "InternalError"):
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}

var ecsDialect = dialect{
	api:           apiECS,
	quota:         ECSCodeQuota,
	noStock:       ECSCodeNoStock,
	dryRun:        ecsCodeDryRun,
	tokenMismatch: ECSCodeIdempotentMismatch,
}

// ECS returns the ECS API endpoint of the emulator: an http.Handler to
// serve on its own listener (see StartECS). It shares everything with the
// CVM endpoint (ServeHTTP) except the wire protocol and the VMs it lists.
func (e *Emulator) ECS() http.Handler { return ecsFront{e} }

type ecsFront struct{ e *Emulator }

func (f ecsFront) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.e.serve(f, w, r) }

// ecsAction is the request's action: the x-acs-action header the SDK
// sends, or the Action parameter of the classic RPC form.
func ecsAction(r *http.Request) string {
	if a := r.Header.Get("x-acs-action"); a != "" {
		return a
	}
	return r.URL.Query().Get("Action")
}

func (f ecsFront) actionOf(r *http.Request) string {
	if a := ecsAction(r); slices.Contains(ECSActions, a) {
		return a
	}
	return ""
}

type ecsError struct {
	RequestID string `json:"RequestId"`
	HostID    string `json:"HostId"`
	Code      string `json:"Code"`
	Message   string `json:"Message"`
	Recommend string `json:"Recommend"`
}

func (f ecsFront) write(w http.ResponseWriter, reqID string, result any, aerr *apiError) {
	w.Header().Set("x-acs-request-id", reqID)
	if aerr == nil {
		f.e.writeJSON(w, reqID, http.StatusOK, result, `{"RequestId":"`+reqID+`","Code":"InternalError","Message":"response encoding failed"}`)
		return
	}
	if aerr.rateLimit > 0 {
		w.Header().Set("x-ratelimit-user-api", fmt.Sprintf("Limit:%g,Remain:0,TimeLeft:%d,Reset:%d",
			aerr.rateLimit, aerr.retryIn.Milliseconds(), time.Now().Add(aerr.retryIn).UnixMilli()))
	}
	body := ecsError{
		RequestID: reqID,
		HostID:    "ecs.aliyuncs.com",
		Code:      aerr.Code,
		Message:   aerr.Message,
		Recommend: "https://api.aliyun.com/troubleshoot?q=" + url.QueryEscape(aerr.Code) + "&product=Ecs&requestId=" + reqID,
	}
	f.e.writeJSON(w, reqID, statusOf(aerr), body, `{"RequestId":"`+reqID+`","Code":"InternalError","Message":"response encoding failed"}`)
}

func (f ecsFront) throttled(observed int, limit float64, wait time.Duration) *apiError {
	aerr := errf(ECSCodeThrottling, "Request was denied due to user flow control (%d requests in the last second, limit %g/s).", observed, limit)
	aerr.rateLimit, aerr.retryIn = limit, wait
	return aerr
}

var ecsActions = map[string]actionFunc{
	ActionRunInstances:           (*Emulator).ecsRunInstances,
	ActionDescribeInstances:      (*Emulator).ecsDescribeInstances,
	ActionDeleteInstances:        (*Emulator).ecsDeleteInstances,
	ActionDescribeInstanceStatus: (*Emulator).ecsDescribeInstanceStatus,
	ActionTagResources:           (*Emulator).ecsTagResources,

	ActionDescribeInstanceTypes:     (*Emulator).ecsDescribeInstanceTypes,
	ActionDescribeAvailableResource: (*Emulator).ecsDescribeAvailableResource,
}

func (f ecsFront) actions() map[string]actionFunc { return ecsActions }

// admit performs what the ECS API gateway does before an action runs.
func (f ecsFront) admit(w http.ResponseWriter, r *http.Request, reqID string) (*call, *apiError) {
	e := f.e
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		return nil, errf(ecsCodeInvalidParameter, "The HTTP method %s is not supported; use GET or POST.", r.Method)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, errf(ecsCodeRequestTooLarge, "The request body exceeds %d bytes.", maxBodyBytes)
		}
		return nil, errf(ecsCodeInvalidParameter, "Cannot read the request body: %v.", err)
	}
	accessKeyID, aerr := e.verifyACS3(r, body)
	if aerr != nil {
		return nil, aerr
	}
	params := map[string]string{}
	for k, v := range r.URL.Query() {
		params[k] = v[0]
	}
	if len(body) > 0 {
		mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if mt != "application/x-www-form-urlencoded" {
			return nil, errf(ecsCodeInvalidParameter, "Content-Type %q is not supported; send parameters in the query or a form body.", mt)
		}
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, errf(ecsCodeInvalidParameter, "The form body is malformed: %v.", err)
		}
		for k, v := range form {
			params[k] = v[0]
		}
	}
	version := r.Header.Get("x-acs-version")
	if version == "" {
		version = params["Version"]
	}
	if version != ECSAPIVersion {
		return nil, errf(ecsCodeInvalidVersion, "Specified parameter Version is not valid: %q (the emulator serves %s).", version, ECSAPIVersion)
	}
	action := ecsAction(r)
	if !slices.Contains(ECSActions, action) {
		return nil, errf(ecsCodeInvalidAction, "Specified api %q is not found, please check your url and method.", action)
	}
	delete(params, "Action")
	delete(params, "Version")
	c := &call{ctx: r.Context(), reqID: reqID, action: action, secretID: accessKeyID, account: e.accountOf(accessKeyID),
		api: apiECS, params: params, region: params["RegionId"]}
	if c.region == "" && action == ActionDescribeInstanceTypes {
		// The one action without a RegionId (the SDK sends none): the
		// catalogue of types is the same everywhere.
		return c, nil
	}
	if c.region == "" {
		return c, errf(ecsCodeMissingParameter, "The input parameter \"RegionId\" that is mandatory for processing this request is not supplied.")
	}
	if !e.regionOK(c.region) {
		return c, errf(ecsCodeRegionNotFound, "The specified RegionId %q does not exist.", c.region)
	}
	return c, nil
}
