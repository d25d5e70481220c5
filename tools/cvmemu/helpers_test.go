package cvmemu

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	tcerr "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common/errors"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"
)

const (
	testRegion   = "ap-guangzhou"
	testZone     = "ap-guangzhou-3"
	testSecretID = "AKIDtest"
	testKey      = "test-secret-key"
	testImage    = "img-abcdefgh"
	// testTimeout bounds every poll; generous for busy 2-core machines.
	testTimeout = 20 * time.Second
)

// testConfig is DefaultConfig with fast timings and no rate limits, so tests
// only meet the limits they configure.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Credentials = map[string]string{testSecretID: testKey, "AKIDother": "other-key"}
	cfg.Accounts = map[string]string{testSecretID: "acct1", "AKIDother": "acct2"}
	cfg.BootDelay = 50 * time.Millisecond
	cfg.TerminateDelay = 50 * time.Millisecond
	cfg.RateLimits = nil
	cfg.Seed = 1
	return cfg
}

func startServer(t *testing.T, cfg Config, opts ...Option) *Server {
	t.Helper()
	return startWith(t, Start, cfg, opts...)
}

// startWith starts a server with start (Start or StartECS), closed when
// the test ends.
func startWith(t *testing.T, start func(string, Config, ...Option) (*Server, error), cfg Config, opts ...Option) *Server {
	t.Helper()
	s, err := start("127.0.0.1:0", cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close server: %v", err)
		}
	})
	return s
}

func sdkClient(t *testing.T, s *Server, secretID, key string) *cvm.Client {
	t.Helper()
	c, err := NewClient(s.Endpoint(), secretID, key, testRegion)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func errCode(err error) string {
	var e *tcerr.TencentCloudSDKError
	if errors.As(err, &e) {
		return e.Code
	}
	if err != nil {
		return "non-SDK error: " + err.Error()
	}
	return ""
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := errCode(err); got != code {
		t.Fatalf("error code = %q, want %q (err: %v)", got, code, err)
	}
}

type runOpts struct {
	count int64
	token string
	zone  string
	itype string
	name  string
	tags  map[string]string
}

func runInstances(c *cvm.Client, o runOpts) ([]string, error) {
	req := cvm.NewRunInstancesRequest()
	if o.zone == "" {
		o.zone = testZone
	}
	req.Placement = &cvm.Placement{Zone: common.StringPtr(o.zone)}
	req.ImageId = common.StringPtr(testImage)
	if o.itype != "" {
		req.InstanceType = common.StringPtr(o.itype)
	}
	if o.count > 0 {
		req.InstanceCount = common.Int64Ptr(o.count)
	}
	if o.token != "" {
		req.ClientToken = common.StringPtr(o.token)
	}
	if o.name != "" {
		req.InstanceName = common.StringPtr(o.name)
	}
	if len(o.tags) > 0 {
		spec := &cvm.TagSpecification{ResourceType: common.StringPtr("instance")}
		for k, v := range o.tags {
			spec.Tags = append(spec.Tags, &cvm.Tag{Key: common.StringPtr(k), Value: common.StringPtr(v)})
		}
		req.TagSpecification = []*cvm.TagSpecification{spec}
	}
	resp, err := c.RunInstances(req)
	if err != nil {
		return nil, err
	}
	return common.StringValues(resp.Response.InstanceIdSet), nil
}

func describeIDs(c *cvm.Client, ids []string) (*cvm.DescribeInstancesResponseParams, error) {
	req := cvm.NewDescribeInstancesRequest()
	req.InstanceIds = common.StringPtrs(ids)
	req.Limit = common.Int64Ptr(100)
	resp, err := c.DescribeInstances(req)
	if err != nil {
		return nil, err
	}
	return resp.Response, nil
}

// waitState polls DescribeInstances until every id is in state.
func waitState(t *testing.T, c *cvm.Client, ids []string, state string) []*cvm.Instance {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		resp, err := describeIDs(c, ids)
		if err != nil {
			t.Fatal(err)
		}
		ok := len(resp.InstanceSet) == len(ids)
		for _, in := range resp.InstanceSet {
			ok = ok && *in.InstanceState == state
		}
		if ok {
			return resp.InstanceSet
		}
		if time.Now().After(deadline) {
			t.Fatalf("instances %v did not all reach %s", ids, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func terminate(c *cvm.Client, ids ...string) error {
	req := cvm.NewTerminateInstancesRequest()
	req.InstanceIds = common.StringPtrs(ids)
	_, err := c.TerminateInstances(req)
	return err
}

// rawRequest sends a hand-built, correctly signed request; it lets tests
// send what the SDK never would (broken JSON, odd headers).
type rawRequest struct {
	method, action, version, region, contentType string
	body                                         string
	secretID, key                                string
	timestamp                                    int64
	noAuth                                       bool
}

type rawResponse struct {
	Response struct {
		Error *struct {
			Code    string
			Message string
		}
		RequestID string `json:"RequestId"`
	}
}

func sendRaw(t *testing.T, s *Server, r rawRequest) rawResponse {
	t.Helper()
	if r.method == "" {
		r.method = http.MethodPost
	}
	if r.version == "" {
		r.version = APIVersion
	}
	if r.contentType == "" {
		r.contentType = "application/json"
	}
	if r.secretID == "" {
		r.secretID, r.key = testSecretID, testKey
	}
	if r.timestamp == 0 {
		r.timestamp = time.Now().Unix()
	}
	req, err := http.NewRequest(r.method, "http://"+s.Endpoint()+"/", bytes.NewBufferString(r.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", r.contentType)
	req.Header.Set("X-TC-Action", r.action)
	req.Header.Set("X-TC-Version", r.version)
	req.Header.Set("X-TC-Timestamp", strconv.FormatInt(r.timestamp, 10))
	if r.region != "-" {
		region := r.region
		if region == "" {
			region = testRegion
		}
		req.Header.Set("X-TC-Region", region)
	}
	if !r.noAuth {
		date := time.Unix(r.timestamp, 0).UTC().Format("2006-01-02")
		headers := "content-type:" + r.contentType + "\nhost:" + s.Endpoint() + "\n"
		sig := tc3Signature(r.key, r.method, req.URL, headers, []string{"content-type", "host"},
			sha256Hex([]byte(r.body)), r.timestamp, date)
		req.Header.Set("Authorization", fmt.Sprintf("TC3-HMAC-SHA256 Credential=%s/%s/cvm/tc3_request, SignedHeaders=content-type;host, Signature=%s",
			r.secretID, date, sig))
	}
	return doRaw(t, req)
}

// newSignedHTTPRequest builds a DescribeInstances request carrying the given
// Authorization header verbatim.
func newSignedHTTPRequest(s *Server, auth string) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+s.Endpoint()+"/", bytes.NewBufferString("{}"))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-TC-Action", ActionDescribeInstances)
	req.Header.Set("X-TC-Version", APIVersion)
	req.Header.Set("X-TC-Region", testRegion)
	req.Header.Set("X-TC-Timestamp", strconv.FormatInt(time.Now().Unix(), 10))
	req.Header.Set("Authorization", auth)
	return req, nil
}

// doRaw sends req and decodes the Tencent-shaped answer.
func doRaw(t *testing.T, req *http.Request) rawResponse {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP status %d, body %s", resp.StatusCode, b)
	}
	var out rawResponse
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("response is not JSON: %v: %s", err, b)
	}
	if out.Response.RequestID == "" {
		t.Fatalf("response without RequestId: %s", b)
	}
	return out
}

func (r rawResponse) code() string {
	if r.Response.Error == nil {
		return ""
	}
	return r.Response.Error.Code
}
