package cvmemu

import (
	"testing"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"
	tagapi "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/tag/v20180813"
)

func tagClient(t *testing.T, s *Server, secretID, key string) *tagapi.Client {
	t.Helper()
	c, err := tagapi.NewClient(common.NewCredential(secretID, key), testRegion, ClientProfile(s.Endpoint()))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func attach(c *tagapi.Client, ids []string, key, value string, mod func(*tagapi.AttachResourcesTagRequest)) error {
	r := tagapi.NewAttachResourcesTagRequest()
	r.ServiceType = common.StringPtr("cvm")
	r.ResourcePrefix = common.StringPtr("instance")
	r.ResourceRegion = common.StringPtr(testRegion)
	r.ResourceIds = common.StringPtrs(ids)
	r.TagKey = common.StringPtr(key)
	r.TagValue = common.StringPtr(value)
	if mod != nil {
		mod(r)
	}
	_, err := c.AttachResourcesTag(r)
	return err
}

func TestAttachResourcesTag(t *testing.T) {
	s := startServer(t, testConfig())
	c := sdkClient(t, s, testSecretID, testKey)
	ids, err := runInstances(c, runOpts{count: 2, tags: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	tc := tagClient(t, s, testSecretID, testKey)
	if err := attach(tc, ids, "nodesmith:cluster", "c1", nil); err != nil {
		t.Fatal(err)
	}
	if err := attach(tc, ids[:1], "team", "b", nil); err != nil { // replaces the value
		t.Fatal(err)
	}
	for i, id := range ids {
		info, _ := s.VM(id)
		wantTeam := map[bool]string{true: "b", false: "a"}[i == 0]
		if info.Tags["nodesmith:cluster"] != "c1" || info.Tags["team"] != wantTeam {
			t.Errorf("VM %s tags %v", id, info.Tags)
		}
	}
	// The listing by tag sees them.
	req := cvm.NewDescribeInstancesRequest()
	req.Filters = []*cvm.Filter{{Name: common.StringPtr("tag:nodesmith:cluster"), Values: common.StringPtrs([]string{"c1"})}}
	resp, err := c.DescribeInstances(req)
	if err != nil || len(resp.Response.InstanceSet) != 2 {
		t.Fatalf("listing by the new tag: %v, %v", err, resp)
	}

	// Strictness.
	other := tagClient(t, s, "AKIDother", "other-key")
	wantCode(t, attach(other, ids, "k", "v", nil), CodeTagResourceNotFound) // another account's VMs
	wantCode(t, attach(tc, []string{"ins-00000000"}, "k", "v", nil), CodeTagResourceNotFound)
	wantCode(t, attach(tc, ids, "k", "v", func(r *tagapi.AttachResourcesTagRequest) { r.ResourceRegion = common.StringPtr("ap-beijing") }), CodeTagResourceNotFound)
	wantCode(t, attach(tc, ids, "k", "v", func(r *tagapi.AttachResourcesTagRequest) { r.ServiceType = common.StringPtr("cbs") }), CodeTagResourceDesc)
	wantCode(t, attach(tc, ids, "k", "v", func(r *tagapi.AttachResourcesTagRequest) { r.ResourcePrefix = nil }), CodeTagResourceDesc)
	wantCode(t, attach(tc, ids, "k", "v", func(r *tagapi.AttachResourcesTagRequest) { r.TagValue = nil }), CodeMissingParameter)
	wantCode(t, attach(tc, ids, "qcloud:x", "v", nil), CodeTagKeyReserved)
	many := make([]string, 51)
	for i := range many {
		many[i] = ids[0]
	}
	wantCode(t, attach(tc, many, "k", "v", nil), CodeParamValueLimitExceeded)
	// Nothing was tagged by the refused calls.
	if info, _ := s.VM(ids[1]); len(info.Tags) != 2 {
		t.Errorf("tags after refusals %v", info.Tags)
	}
}
