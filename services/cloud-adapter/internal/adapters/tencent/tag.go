package tencent

import (
	"context"
	"fmt"
	"slices"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	tag "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/tag/v20180813"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/cloudcall"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// maxTagResources is AttachResourcesTag's most resource ids per call.
const maxTagResources = 50

// Tag implements ports.Cloud. CVM has no call that changes an existing
// instance's tags: the Tag service's AttachResourcesTag does, one key and
// value per call for up to 50 instances of one region (ServiceType cvm,
// ResourcePrefix instance), creating the tag if needed and replacing the
// value of a key the instance already has. Needs the tag:AttachResourcesTag
// permission besides CVM's.
func (c *Cloud) Tag(ctx context.Context, t ports.Target, ids []string, tags []domain.Tag) error {
	if err := cloudcall.CheckIDs(ids); err != nil {
		return err
	}
	for chunk := range slices.Chunk(ids, maxTagResources) {
		for _, tg := range tags {
			err := c.base.Call(ctx, t, ActionAttachResourcesTag, func(ctx context.Context, api API) error {
				r := tag.NewAttachResourcesTagRequest()
				r.ServiceType = common.StringPtr("cvm")
				r.ResourcePrefix = common.StringPtr("instance")
				r.ResourceRegion = common.StringPtr(t.Region)
				r.ResourceIds = common.StringPtrs(chunk)
				r.TagKey = common.StringPtr(tg.Key)
				r.TagValue = common.StringPtr(tg.Value)
				_, err := api.AttachResourcesTagWithContext(ctx, r)
				return err
			})
			if err != nil {
				return fmt.Errorf("AttachResourcesTag %s (%d ids): %w", tg.Key, len(chunk), err)
			}
		}
	}
	return nil
}
