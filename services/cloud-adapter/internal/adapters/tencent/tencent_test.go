package tencent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	tcerr "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common/errors"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"
	tag "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/tag/v20180813"

	"github.com/nodesmith/nodesmith/libs/backoff"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/adaptertest"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/cloudcall"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// stubAPI stands in for the SDK client: it records requests and answers
// with programmed errors first, then with its handlers.
type stubAPI struct {
	mu        sync.Mutex
	errs      map[string][]error
	runs      []*cvm.RunInstancesRequest
	describes []*cvm.DescribeInstancesRequest
	terms     [][]string
	tags      []*tag.AttachResourcesTagRequest
	instances []*cvm.Instance // what DescribeInstances knows
}

func (s *stubAPI) AttachResourcesTagWithContext(_ context.Context, r *tag.AttachResourcesTagRequest) (*tag.AttachResourcesTagResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tags = append(s.tags, r)
	if err := s.next(ActionAttachResourcesTag); err != nil {
		return nil, err
	}
	return tag.NewAttachResourcesTagResponse(), nil
}

func (s *stubAPI) next(action string) error {
	q := s.errs[action]
	if len(q) == 0 {
		return nil
	}
	s.errs[action] = q[1:]
	return q[0]
}

func (s *stubAPI) RunInstancesWithContext(_ context.Context, r *cvm.RunInstancesRequest) (*cvm.RunInstancesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs = append(s.runs, r)
	if err := s.next(ActionRunInstances); err != nil {
		return nil, err
	}
	resp := cvm.NewRunInstancesResponse()
	resp.Response = &cvm.RunInstancesResponseParams{}
	for i := range *r.InstanceCount {
		resp.Response.InstanceIdSet = append(resp.Response.InstanceIdSet, common.StringPtr(fmt.Sprintf("ins-%s-%d", *r.ClientToken, i)))
	}
	return resp, nil
}

func (s *stubAPI) DescribeInstancesWithContext(_ context.Context, r *cvm.DescribeInstancesRequest) (*cvm.DescribeInstancesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.describes = append(s.describes, r)
	if err := s.next(ActionDescribeInstances); err != nil {
		return nil, err
	}
	var match []*cvm.Instance
	for _, in := range s.instances {
		if len(r.InstanceIds) > 0 && !slices.Contains(common.StringValues(r.InstanceIds), *in.InstanceId) {
			continue
		}
		match = append(match, in)
	}
	off, lim := int(deref64(r.Offset)), int(deref64(r.Limit))
	page := match[min(off, len(match)):min(off+lim, len(match))]
	resp := cvm.NewDescribeInstancesResponse()
	resp.Response = &cvm.DescribeInstancesResponseParams{TotalCount: common.Int64Ptr(int64(len(match))), InstanceSet: page}
	return resp, nil
}

func (s *stubAPI) TerminateInstancesWithContext(_ context.Context, r *cvm.TerminateInstancesRequest) (*cvm.TerminateInstancesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.terms = append(s.terms, common.StringValues(r.InstanceIds))
	if err := s.next(ActionTerminateInstances); err != nil {
		return nil, err
	}
	return cvm.NewTerminateInstancesResponse(), nil
}

func (s *stubAPI) DescribeZoneInstanceConfigInfosWithContext(context.Context, *cvm.DescribeZoneInstanceConfigInfosRequest) (*cvm.DescribeZoneInstanceConfigInfosResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.next(ActionDescribeZoneInstanceConfigInfos); err != nil {
		return nil, err
	}
	resp := cvm.NewDescribeZoneInstanceConfigInfosResponse()
	resp.Response = &cvm.DescribeZoneInstanceConfigInfosResponseParams{}
	return resp, nil
}

func deref64(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func instance(id, state, ip string, tags map[string]string) *cvm.Instance {
	in := &cvm.Instance{
		InstanceId: common.StringPtr(id), InstanceState: common.StringPtr(state),
		Placement:   &cvm.Placement{Zone: common.StringPtr("ap-guangzhou-3")},
		CreatedTime: common.StringPtr("2030-01-02T03:04:05Z"),
	}
	if ip != "" {
		in.PrivateIpAddresses = []*string{common.StringPtr(ip)}
	}
	for k, v := range tags {
		in.Tags = append(in.Tags, &cvm.Tag{Key: common.StringPtr(k), Value: common.StringPtr(v)})
	}
	return in
}

func sdkErr(code string) error { return tcerr.NewTencentCloudSDKError(code, "msg", "req-1") }

func newCloud(t *testing.T, api *stubAPI) *Cloud {
	t.Helper()
	if api.errs == nil {
		api.errs = map[string][]error{}
	}
	return New(Options{
		Clients: func(account, region string) (API, error) { return api, nil },
		// Unpaced: these tests are about behaviour.
		Settings: adaptertest.Settings(nil, backoff.Policy{Initial: time.Millisecond, Max: 2 * time.Millisecond, Attempts: 4}),
	})
}

var tgt = ports.Target{Account: "a", Region: "ap-guangzhou"}

func TestCreateBatchBuildsTheRequestFromTheTemplate(t *testing.T) {
	api := &stubAPI{}
	c := newCloud(t, api)
	params := `{"InstanceType":"S5.MEDIUM4","Placement":{"Zone":"ap-guangzhou-3"},"ImageId":"img-1",
		"InstanceCount":7,"ClientToken":"template-token",
		"TagSpecification":[{"ResourceType":"instance","Tags":[{"Key":"team","Value":"infra"},{"Key":"nodesmith:group","Value":"stale"}]},
		                    {"ResourceType":"disk","Tags":[{"Key":"d","Value":"1"}]}]}`
	ids, err := c.CreateBatch(context.Background(), ports.CreateRequest{
		Target: tgt, ClientToken: "tok", Template: "small", Parameters: params, Count: 3,
		Tags: domain.CreationTags("c1", "g1", "b1", ""),
	})
	if err != nil {
		t.Fatalf("CreateBatch: %v", err)
	}
	if got := fmt.Sprint(ids); got != "[ins-tok-0 ins-tok-1 ins-tok-2]" {
		t.Fatalf("ids = %s", got)
	}
	r := api.runs[0]
	if *r.InstanceCount != 3 || *r.ClientToken != "tok" || *r.InstanceType != "S5.MEDIUM4" || *r.Placement.Zone != "ap-guangzhou-3" {
		t.Fatalf("request = %s", r.ToJsonString())
	}
	var inst, disk []string
	for _, s := range r.TagSpecification {
		for _, tag := range s.Tags {
			kv := *tag.Key + "=" + *tag.Value
			if *s.ResourceType == "instance" {
				inst = append(inst, kv)
			} else {
				disk = append(disk, kv)
			}
		}
	}
	if got := fmt.Sprint(inst); got != "[team=infra nodesmith:cluster=c1 nodesmith:group=g1 nodesmith:batch=b1]" {
		t.Fatalf("instance tags = %s", got)
	}
	if got := fmt.Sprint(disk); got != "[d=1]" {
		t.Fatalf("other tag specifications changed: %s", got)
	}
}

func TestCreateBatchRejectsBadRequestsWithoutCalling(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  ports.CreateRequest
		code string
	}{
		{"unknown template key", ports.CreateRequest{ClientToken: "t", Count: 1, Parameters: `{"NoSuchField":1}`}, "InvalidTemplate"},
		{"template is not JSON", ports.CreateRequest{ClientToken: "t", Count: 1, Parameters: `{`}, "InvalidTemplate"},
		{"no token", ports.CreateRequest{Count: 1}, "MissingClientToken"},
		{"token too long", ports.CreateRequest{ClientToken: strings.Repeat("t", 65), Count: 1}, "InvalidClientToken.TooLong"},
		{"too many", ports.CreateRequest{ClientToken: "t", Count: 101}, "InvalidInstanceCount"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &stubAPI{}
			_, err := newCloud(t, api).CreateBatch(context.Background(), tc.req)
			ce, ok := ports.AsCloudError(err)
			if !ok || ce.Kind != ports.ErrorKindInvalidParameters || ce.Code != tc.code {
				t.Fatalf("err = %v, want invalid parameters %s", err, tc.code)
			}
			if len(api.runs) != 0 {
				t.Fatal("RunInstances called for a request that cannot succeed")
			}
		})
	}
}

func TestRetriesThrottledAndTransientButNotDefinitiveErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		errs      []error
		wantCalls int
		wantKind  ports.ErrorKind // ErrorKindUnknown: success
	}{
		{"throttled then ok", []error{sdkErr("RequestLimitExceeded"), sdkErr("RequestLimitExceeded.UinLimitExceeded")}, 3, ports.ErrorKindUnknown},
		{"network failure then ok", []error{sdkErr("ClientError.NetworkError"), sdkErr("InternalError")}, 3, ports.ErrorKindUnknown},
		{"throttled past the bound", []error{sdkErr("RequestLimitExceeded"), sdkErr("RequestLimitExceeded"), sdkErr("RequestLimitExceeded"), sdkErr("RequestLimitExceeded")}, 4, ports.ErrorKindThrottled},
		{"capacity is not retried", []error{sdkErr("ResourceInsufficient.SpecifiedInstanceType")}, 1, ports.ErrorKindCapacity},
		{"auth is not retried", []error{sdkErr("AuthFailure.SignatureFailure")}, 1, ports.ErrorKindAuth},
		{"plain errors count as transient", []error{errors.New("connection reset")}, 2, ports.ErrorKindUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &stubAPI{errs: map[string][]error{ActionRunInstances: tc.errs}}
			_, err := newCloud(t, api).CreateBatch(context.Background(), ports.CreateRequest{Target: tgt, ClientToken: "tok", Count: 1})
			if len(api.runs) != tc.wantCalls {
				t.Fatalf("calls = %d, want %d", len(api.runs), tc.wantCalls)
			}
			for _, r := range api.runs {
				if *r.ClientToken != "tok" {
					t.Fatalf("a retry changed the ClientToken to %q", *r.ClientToken)
				}
			}
			if tc.wantKind == ports.ErrorKindUnknown {
				if err != nil {
					t.Fatalf("err = %v, want success", err)
				}
				return
			}
			if ports.KindOf(err) != tc.wantKind {
				t.Fatalf("err = %v, want kind %s", err, tc.wantKind)
			}
		})
	}
}

func TestErrorCodeMapping(t *testing.T) {
	for code, want := range map[string]ports.ErrorKind{
		"LimitExceeded.CvmInstanceQuota":                          ports.ErrorKindCapacity,
		"LimitExceeded.InstanceQuota":                             ports.ErrorKindCapacity,
		"LimitExceeded.SpotQuota":                                 ports.ErrorKindCapacity,
		"ResourceInsufficient.SpecifiedInstanceType":              ports.ErrorKindCapacity,
		"ResourceInsufficient.AvailabilityZoneSoldOut":            ports.ErrorKindCapacity,
		"ResourceInsufficient.ZoneSoldOutForSpecifiedInstance":    ports.ErrorKindCapacity,
		"ResourcesSoldOut.SpecifiedInstanceType":                  ports.ErrorKindCapacity,
		"ResourcesSoldOut.AvailableZone":                          ports.ErrorKindCapacity,
		"InstancesQuotaLimitExceeded":                             ports.ErrorKindCapacity,
		"InvalidAccount.InsufficientBalance":                      ports.ErrorKindCapacity,
		"InvalidParameterValue.InsufficientOffering":              ports.ErrorKindCapacity,
		"FailedOperation.NoAvailableIpAddressCountInSubnet":       ports.ErrorKindCapacity,
		"RequestLimitExceeded":                                    ports.ErrorKindThrottled,
		"RequestLimitExceeded.GlobalRegionUinLimitExceeded":       ports.ErrorKindThrottled,
		"InvalidInstanceId.NotFound":                              ports.ErrorKindNotFound,
		"UnsupportedOperation.InstanceStateTerminated":            ports.ErrorKindNotFound,
		"InvalidParameter":                                        ports.ErrorKindInvalidParameters,
		"InvalidParameterValue.LimitExceeded":                     ports.ErrorKindInvalidParameters,
		"InvalidParameterCombination":                             ports.ErrorKindInvalidParameters,
		"InvalidImageId.NotFound":                                 ports.ErrorKindInvalidParameters,
		"InvalidZone.MismatchRegion":                              ports.ErrorKindInvalidParameters,
		"InvalidInstanceId.Malformed":                             ports.ErrorKindInvalidParameters,
		"MissingParameter":                                        ports.ErrorKindInvalidParameters,
		"UnknownParameter":                                        ports.ErrorKindInvalidParameters,
		"UnsupportedRegion":                                       ports.ErrorKindInvalidParameters,
		"InvalidAction":                                           ports.ErrorKindInvalidParameters,
		"LimitExceeded.InstanceTypeBandwidth":                     ports.ErrorKindInvalidParameters,
		"ClientError.BuildRequestError":                           ports.ErrorKindInvalidParameters,
		"AuthFailure.SignatureFailure":                            ports.ErrorKindAuth,
		"AuthFailure.SecretIdNotFound":                            ports.ErrorKindAuth,
		"AuthFailure.SignatureExpire":                             ports.ErrorKindAuth,
		"UnauthorizedOperation":                                   ports.ErrorKindAuth,
		"UnauthorizedOperation.PermissionDenied":                  ports.ErrorKindAuth,
		"ClientError.CredentialError":                             ports.ErrorKindAuth,
		"InternalError":                                           ports.ErrorKindTransient,
		"InternalError.TradeUnknownError":                         ports.ErrorKindTransient,
		"InternalServerError":                                     ports.ErrorKindTransient,
		"ClientError.NetworkError":                                ports.ErrorKindTransient,
		"ClientError.HttpStatusCodeError":                         ports.ErrorKindTransient,
		"OperationDenied.InstanceOperationInProgress":             ports.ErrorKindTransient,
		"UnsupportedOperation.InstanceStatePending":               ports.ErrorKindTransient,
		"MutexOperation.TaskRunning":                              ports.ErrorKindTransient,
		"SomethingNobodyHasSeen":                                  ports.ErrorKindUnknown,
		"UnsupportedOperation.InstanceStateTerminating":           ports.ErrorKindInvalidParameters,
		"InvalidParameterValue.ZoneNotSupported":                  ports.ErrorKindInvalidParameters,
		"InvalidParameterValue.DuplicateTags":                     ports.ErrorKindInvalidParameters,
		"FailedOperation.IllegalTagKey":                           ports.ErrorKindInvalidParameters,
		"InvalidClientToken.TooLong":                              ports.ErrorKindInvalidParameters,
		"ResourceInsufficient.DisasterRecoverGroupCvmQuota":       ports.ErrorKindCapacity,
		"UnsupportedOperation.InsufficientClusterQuota":           ports.ErrorKindCapacity,
		"InvalidParameterValue.TagQuotaLimitExceeded":             ports.ErrorKindCapacity,
		"InvalidFilterValue.LimitExceeded":                        ports.ErrorKindInvalidParameters,
		"OperationDenied.AccountNotSupported":                     ports.ErrorKindAuth,
		"AccountQualificationRestrictions":                        ports.ErrorKindAuth,
		"UnsupportedOperation.RedHatInstanceTerminateUnsupported": ports.ErrorKindInvalidParameters,
	} {
		if got := kindOf(code); got != want {
			t.Errorf("kindOf(%s) = %s, want %s", code, got, want)
		}
	}
}

// TestEverySDKErrorCodeHasAKind guards the mapping against codes falling
// through to "unknown": every code the CVM SDK declares gets a kind.
func TestEverySDKErrorCodeHasAKind(t *testing.T) {
	f, err := os.Open("testdata/cvm_error_codes.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		code := strings.TrimSpace(sc.Text())
		if code == "" || strings.HasPrefix(code, "#") {
			continue
		}
		n++
		if kindOf(code) == ports.ErrorKindUnknown {
			t.Errorf("SDK error code %s has no kind", code)
		}
	}
	if n < 300 {
		t.Fatalf("read %d codes, the SDK declares about 400", n)
	}
}

func TestMapErrorKeepsContextErrorsAndDetails(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := mapError(ctx, sdkErr("InternalError")); !errors.Is(err, context.Canceled) {
		t.Fatalf("mapError with a cancelled caller = %v, want context.Canceled", err)
	}
	err := mapError(context.Background(), sdkErr("LimitExceeded.InstanceQuota"))
	ce, ok := ports.AsCloudError(err)
	if !ok || ce.Code != "LimitExceeded.InstanceQuota" || !strings.Contains(ce.Message, "req-1") {
		t.Fatalf("mapError = %#v, want the code and the request id", err)
	}
	if !ports.IsCapacityError(fmt.Errorf("wrapped: %w", err)) {
		t.Fatal("IsCapacityError does not see through wrapping")
	}
	if err := mapError(context.Background(), context.DeadlineExceeded); !ports.IsTransientError(err) {
		t.Fatalf("a call timeout = %v, want transient", err)
	}
}

func TestDescribeMapsInstances(t *testing.T) {
	api := &stubAPI{instances: []*cvm.Instance{
		instance("ins-1", "RUNNING", "10.0.0.1", map[string]string{"nodesmith:instance": "i1"}),
		instance("ins-2", "PENDING", "", nil),
		instance("ins-3", "LAUNCH_FAILED", "", nil),
		instance("ins-4", "SHUTDOWN", "", nil),
		instance("ins-5", "STOPPED", "", nil),
		instance("ins-6", "SOMETHING_NEW", "", nil),
	}}
	sts, err := newCloud(t, api).Describe(context.Background(), tgt, []string{"ins-1", "ins-2", "ins-3", "ins-4", "ins-5", "ins-6", "ins-gone"})
	if err != nil {
		t.Fatalf("Describe: %v", err)
	}
	var got []string
	for _, s := range sts {
		got = append(got, s.CloudID+"="+s.State.String())
	}
	if want := "[ins-1=RUNNING ins-2=PENDING ins-3=LAUNCH_FAILED ins-4=TERMINATING ins-5=STOPPED ins-6=UNKNOWN]"; fmt.Sprint(got) != want {
		t.Fatalf("states = %v, want %s", got, want)
	}
	s := sts[0]
	if s.PrivateIP != "10.0.0.1" || s.Zone != "ap-guangzhou-3" || s.Tags["nodesmith:instance"] != "i1" ||
		!s.CreatedAt.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("status = %+v", s)
	}
	if _, err := newCloud(t, api).Describe(context.Background(), tgt, make([]string, 101)); !ports.IsInvalidParametersError(err) {
		t.Fatalf("Describe(101 ids) = %v, want invalid parameters", err)
	}
}

func TestTerminateTreatsGoneInstancesAsDone(t *testing.T) {
	for _, tc := range []struct {
		name      string
		errs      []error
		instances []*cvm.Instance
		wantCalls string
		wantErr   ports.ErrorKind
	}{
		{name: "all there", wantCalls: "[[ins-1 ins-2 ins-3]]"},
		{
			name: "one gone, one terminating", errs: []error{sdkErr("InvalidInstanceId.NotFound")},
			instances: []*cvm.Instance{instance("ins-1", "RUNNING", "", nil), instance("ins-2", "TERMINATING", "", nil)},
			wantCalls: "[[ins-1 ins-2 ins-3] [ins-1]]",
		},
		{
			name: "all gone", errs: []error{sdkErr("InvalidInstanceId.NotFound")},
			wantCalls: "[[ins-1 ins-2 ins-3]]",
		},
		{
			name: "terminating answers the same way", errs: []error{sdkErr("UnsupportedOperation.InstanceStateTerminating")},
			instances: []*cvm.Instance{instance("ins-3", "LAUNCH_FAILED", "", nil)},
			wantCalls: "[[ins-1 ins-2 ins-3] [ins-3]]",
		},
		{
			name: "other errors are returned", errs: []error{sdkErr("UnauthorizedOperation")},
			wantCalls: "[[ins-1 ins-2 ins-3]]", wantErr: ports.ErrorKindAuth,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &stubAPI{errs: map[string][]error{ActionTerminateInstances: tc.errs}, instances: tc.instances}
			err := newCloud(t, api).Terminate(context.Background(), tgt, []string{"ins-1", "ins-2", "ins-3"})
			if ports.KindOf(err) != tc.wantErr || (err != nil) != (tc.wantErr != ports.ErrorKindUnknown) {
				t.Fatalf("Terminate = %v, want kind %s", err, tc.wantErr)
			}
			if got := fmt.Sprint(api.terms); got != tc.wantCalls {
				t.Fatalf("TerminateInstances calls = %s, want %s", got, tc.wantCalls)
			}
		})
	}
}

func TestListByTagPages(t *testing.T) {
	api := &stubAPI{}
	for i := range 250 {
		api.instances = append(api.instances, instance(fmt.Sprintf("ins-%03d", i), "RUNNING", "10.0.0.1", map[string]string{domain.TagCluster: "c1"}))
	}
	sts, err := newCloud(t, api).ListByTag(context.Background(), tgt, "c1")
	if err != nil {
		t.Fatalf("ListByTag: %v", err)
	}
	if len(sts) != 250 || sts[249].CloudID != "ins-249" {
		t.Fatalf("listed %d instances", len(sts))
	}
	if len(api.describes) != 3 {
		t.Fatalf("pages = %d, want 3", len(api.describes))
	}
	f := api.describes[2].Filters[0]
	if *f.Name != "tag:nodesmith:cluster" || *f.Values[0] != "c1" || *api.describes[2].Offset != 200 {
		t.Fatalf("third page request = %s", api.describes[2].ToJsonString())
	}
}

type staticCreds map[string]ports.Credential

func (s staticCreds) Lookup(account string) (ports.Credential, error) {
	c, ok := s[account]
	if !ok {
		return ports.Credential{}, fmt.Errorf("%w %q", ports.ErrNoCredentials, account)
	}
	return c, nil
}

func TestClientsNeedCredentialsAndCacheClients(t *testing.T) {
	cl := NewClients(ClientOptions{Credentials: staticCreds{"a": {KeyID: "id", Secret: "key"}}})
	if _, err := cl.Get("nobody", "ap-guangzhou"); !ports.IsAuthError(err) {
		t.Fatalf("Get(unknown account) = %v, want an auth error", err)
	}
	a1, err := cl.Get("a", "ap-guangzhou")
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := cl.Get("a", "ap-guangzhou")
	b, _ := cl.Get("a", "ap-beijing")
	if a1 != a2 || a1 == b {
		t.Fatal("want one client per (account, region)")
	}
	id, key, token := accountCredential{account: "a", store: staticCreds{"a": {KeyID: "id", Secret: "key", SecurityToken: "tk"}}}.GetCredential()
	if id != "id" || key != "key" || token != "tk" {
		t.Fatal("credential snapshot is wrong")
	}
}

// mapError maps err as every call of the adapter does.
func mapError(ctx context.Context, err error) error {
	return cloudcall.New(cloudcall.Options{Provider: Provider, Classify: classify}).MapError(ctx, err)
}

// TestCloudspecMatchesTheSDK: the template rules the API accepts
// (libs/cloudspec) are the shape of the request this adapter decodes
// templates into, or a template the API accepted would fail at create time
// (or a valid one be refused).
func TestCloudspecMatchesTheSDK(t *testing.T) {
	adaptertest.SpecMatchesSDK(t, Provider, reflect.TypeFor[cvm.RunInstancesRequest](), reflect.TypeFor[cvm.DescribeInstancesRequest]())
}
