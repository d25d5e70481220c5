package cvmemu

import (
	"strings"

	tagapi "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/tag/v20180813"
)

// The Tag service (tag.tencentcloudapi.com) for CVM instances: its
// AttachResourcesTag, which binds one tag key and value to up to 50
// resources of one service and region, is how an existing instance gets a
// tag (CVM itself only tags at RunInstances). The emulator serves it on the
// same endpoint, for instances (ServiceType cvm, ResourcePrefix instance)
// of the caller's account, checking what the real service checks: the
// signature's service and version, the resource description, the key and
// value, and the tags per resource. Binding a key the instance already has
// replaces its value.

// Tag service constants.
const (
	TagService               = "tag"
	TagAPIVersion            = "2018-08-13"
	ActionAttachResourcesTag = "AttachResourcesTag"
	// maxTagResources is AttachResourcesTag's most ResourceIds.
	maxTagResources = 50
	maxTagKeyLen    = 127
	maxTagValueLen  = 255
)

// Tag service error codes the emulator answers.
const (
	CodeTagResourceNotFound = "ResourceNotFound.AttachedTagKeyNotFound"
	CodeTagKeyReserved      = "InvalidParameterValue.ReservedTagKey"
	CodeTagKeyLength        = "InvalidParameterValue.TagKeyLengthExceeded"
	CodeTagValueLength      = "InvalidParameterValue.TagValueLengthExceeded"
	CodeTagResourceDesc     = "InvalidParameterValue.ResourceDescriptionError"
	CodeTagQuota            = "LimitExceeded.ResourceAttachedTags"
)

// serviceOf is the signing service (credential scope) of action.
func serviceOf(action string) string {
	if action == ActionAttachResourcesTag {
		return TagService
	}
	return Service
}

// versionOf is the API version of action.
func versionOf(action string) string {
	if action == ActionAttachResourcesTag {
		return TagAPIVersion
	}
	return APIVersion
}

var reservedTagPrefixes = []string{"qcloud", "tencent", "project"}

func (e *Emulator) attachResourcesTag(c *call) (any, *apiError) {
	var p tagapi.AttachResourcesTagRequestParams
	if aerr := decodeParams(c.body, &p); aerr != nil {
		return nil, aerr
	}
	for _, req := range []struct {
		name string
		set  bool
	}{{"ServiceType", p.ServiceType != nil}, {"ResourceIds", len(p.ResourceIds) > 0}, {"TagKey", p.TagKey != nil}, {"TagValue", p.TagValue != nil}} {
		if !req.set {
			return nil, errf(CodeMissingParameter, "The request is missing the required parameter `%s`.", req.name)
		}
	}
	if st := deref(p.ServiceType); st != "cvm" {
		return nil, errf(CodeTagResourceDesc, "ServiceType `%s` is not served by the emulator (cvm is).", st)
	}
	if pr := deref(p.ResourcePrefix); pr != "instance" {
		return nil, errf(CodeTagResourceDesc, "ResourcePrefix `%s` is invalid for ServiceType cvm (instance).", pr)
	}
	region := deref(p.ResourceRegion)
	if region == "" {
		return nil, errf(CodeMissingParameter, "The request is missing the required parameter `ResourceRegion` (cvm resources are regional).")
	}
	if len(p.ResourceIds) > maxTagResources {
		return nil, errf(CodeParamValueLimitExceeded, "At most %d ResourceIds per request are allowed, got %d.", maxTagResources, len(p.ResourceIds))
	}
	key, value := deref(p.TagKey), deref(p.TagValue)
	switch {
	case key == "":
		return nil, errf(CodeIllegalTagKey, "A tag key must not be empty.")
	case len(key) > maxTagKeyLen:
		return nil, errf(CodeTagKeyLength, "The tag key exceeds %d characters.", maxTagKeyLen)
	case len(value) > maxTagValueLen:
		return nil, errf(CodeTagValueLength, "The tag value exceeds %d characters.", maxTagValueLen)
	}
	for _, pre := range reservedTagPrefixes {
		if strings.HasPrefix(strings.ToLower(key), pre) {
			return nil, errf(CodeTagKeyReserved, "The tag key `%s` uses the reserved prefix `%s`.", key, pre)
		}
	}
	ids, aerr := checkInstanceIDs(p.ResourceIds)
	if aerr != nil {
		return nil, aerr
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	acct := e.accountLocked(c.account)
	// All or nothing, as the resource descriptions are checked first.
	vms := make([]*vm, 0, len(ids))
	for _, id := range ids {
		v, ok := acct.vms[id]
		if !ok || v.region != region {
			return nil, errf(CodeTagResourceNotFound, "The resource qcs::cvm:%s:uin/%s:instance/%s is not found.", region, c.account, id)
		}
		if !hasTag(v.tags, key) && len(v.tags) >= maxTagsPerInstance {
			return nil, errf(CodeTagQuota, "The resource %s already has %d tags.", id, maxTagsPerInstance)
		}
		vms = append(vms, v)
	}
	for _, v := range vms {
		v.tags = setTag(v.tags, key, value)
	}
	e.changedLocked()
	e.log.Info("AttachResourcesTag", "account", c.account, "ids", ids, "key", key)
	return map[string]any{"RequestId": c.reqID}, nil
}

func hasTag(tags []tag, key string) bool {
	for _, t := range tags {
		if t.Key == key {
			return true
		}
	}
	return false
}

func setTag(tags []tag, key, value string) []tag {
	for i := range tags {
		if tags[i].Key == key {
			tags[i].Value = value
			return tags
		}
	}
	return append(tags, tag{Key: key, Value: value})
}
