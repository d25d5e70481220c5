package tencent

import (
	"context"
	"fmt"
	"testing"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	tcerr "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common/errors"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// One AttachResourcesTag per tag and per 50 instances, naming CVM
// instances of the target's region.
func TestTagAttachesEachTagByChunks(t *testing.T) {
	api := &stubAPI{}
	c := newCloud(t, api)
	ids := make([]string, 60)
	for i := range ids {
		ids[i] = fmt.Sprintf("ins-%03d", i)
	}
	tags := domain.AdoptionTags("c1", "g1", "g1-abc")
	if err := c.Tag(context.Background(), tgt, ids, tags); err != nil {
		t.Fatal(err)
	}
	if len(api.tags) != 6 {
		t.Fatalf("%d calls, want 2 chunks x 3 tags", len(api.tags))
	}
	for i, r := range api.tags {
		if *r.ServiceType != "cvm" || *r.ResourcePrefix != "instance" || *r.ResourceRegion != tgt.Region {
			t.Errorf("call %d names %s/%s/%s", i, *r.ServiceType, *r.ResourcePrefix, *r.ResourceRegion)
		}
		want := tags[i%3]
		if *r.TagKey != want.Key || *r.TagValue != want.Value {
			t.Errorf("call %d tag %s=%s, want %s=%s", i, *r.TagKey, *r.TagValue, want.Key, want.Value)
		}
		if n := len(r.ResourceIds); (i < 3 && n != 50) || (i >= 3 && n != 10) {
			t.Errorf("call %d has %d ids", i, n)
		}
	}
	if got := common.StringValues(api.tags[3].ResourceIds)[0]; got != "ins-050" {
		t.Errorf("second chunk starts at %s", got)
	}
}

// A throttled answer is retried; a refusal is returned classified.
func TestTagErrors(t *testing.T) {
	api := &stubAPI{errs: map[string][]error{ActionAttachResourcesTag: {
		tcerr.NewTencentCloudSDKError("RequestLimitExceeded", "slow down", "r1"),
		nil,
		tcerr.NewTencentCloudSDKError("AuthFailure.UnauthorizedOperation", "no tag permission", "r2"),
	}}}
	c := newCloud(t, api)
	err := c.Tag(context.Background(), tgt, []string{"ins-1"}, domain.AdoptionTags("c1", "g1", "i1"))
	ce, ok := ports.AsCloudError(err)
	if !ok || ce.Kind != ports.ErrorKindAuth || ce.Code != "AuthFailure.UnauthorizedOperation" {
		t.Fatalf("err %v, want the auth refusal of the second tag", err)
	}
	if len(api.tags) != 3 {
		t.Errorf("%d calls, want throttled + retried + refused", len(api.tags))
	}
}
