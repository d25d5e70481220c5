// Package tencent implements ports.Cloud for Tencent Cloud CVM with the
// official tencentcloud-sdk-go. It paces every call with a client-side rate
// limiter per (account, region, action), retries throttled and transient
// answers with jittered exponential backoff up to a bound, and maps
// Tencent's error codes to the port's kinds in one place (errors.go).
package tencent

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/cloudcall"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ratelimit"
)

// Provider is the name commands use for Tencent Cloud.
const Provider = cloudspec.Tencent

// CVM API actions.
const (
	ActionRunInstances       = "RunInstances"
	ActionDescribeInstances  = "DescribeInstances"
	ActionTerminateInstances = "TerminateInstances"
	// ActionAttachResourcesTag is the Tag service's (tagging existing VMs).
	ActionAttachResourcesTag = "AttachResourcesTag"
	// ActionDescribeZoneInstanceConfigInfos is the catalogue of instance
	// types per zone (InstanceShapes).
	ActionDescribeZoneInstanceConfigInfos = "DescribeZoneInstanceConfigInfos"
)

// DefaultLimits stay below Tencent's published per-account limits
// (RunInstances 10/s, TerminateInstances 10/s, DescribeInstances 20/s),
// leaving room for other clients of the same account.
func DefaultLimits() ratelimit.Limits {
	return ratelimit.Limits{
		ActionRunInstances:       {Rate: 8, Burst: 2},
		ActionTerminateInstances: {Rate: 8, Burst: 2},
		ActionDescribeInstances:  {Rate: 16, Burst: 4},
		// The Tag service allows 20 requests a second.
		ActionAttachResourcesTag: {Rate: 10, Burst: 2},
		// 20 a second; asked rarely (validating a template's offerings).
		ActionDescribeZoneInstanceConfigInfos: {Rate: 5, Burst: 2},
	}
}

// pageSize is DescribeInstances' maximum Limit.
const pageSize = 100

// Options configure a Cloud: its SDK clients, and pacing, retries and
// timeouts (nil Limits means DefaultLimits).
type Options = cloudcall.AdapterOptions[API]

// Cloud is the Tencent Cloud CVM adapter.
type Cloud struct {
	base *cloudcall.Adapter[API]
}

var (
	_ ports.Cloud          = (*Cloud)(nil)
	_ ports.InstanceShapes = (*Cloud)(nil)
)

// New returns a Cloud.
func New(o Options) *Cloud {
	return &Cloud{base: cloudcall.NewAdapter(cloudcall.Profile{
		Provider: Provider, RPCSystem: Provider, Service: "cvm", Classify: classify, DefaultLimits: DefaultLimits(),
	}, o)}
}

// CreateBatch implements ports.Cloud with one RunInstances call: the
// template is the command's parameters_json decoded into the SDK request,
// then InstanceCount, ClientToken and nodesmith's tags are set over it.
func (c *Cloud) CreateBatch(ctx context.Context, req ports.CreateRequest) ([]string, error) {
	return cloudcall.Create(ctx, c.base, req, ActionRunInstances, runRequest, func(ctx context.Context, api API, r *cvm.RunInstancesRequest) ([]string, error) {
		resp, err := api.RunInstancesWithContext(ctx, r)
		if err != nil {
			return nil, withPlacement(err, r)
		}
		if resp.Response == nil {
			return nil, nil
		}
		return common.StringValues(resp.Response.InstanceIdSet), nil
	})
}

// withPlacement classifies a RunInstances error and, for a capacity
// error, names the zone and instance type that ran out in its message
// (Tencent's own message often names neither), so operators and CA's
// error message tell which offering failed.
func withPlacement(err error, r *cvm.RunInstancesRequest) error {
	ce, ok := classify(err)
	if !ok || ce.Kind != ports.ErrorKindCapacity {
		return err
	}
	zone := ""
	if r.Placement != nil {
		zone = deref(r.Placement.Zone)
	}
	ce.Message = fmt.Sprintf("zone %s, instance type %s: %s", orUnset(zone), orUnset(deref(r.InstanceType)), ce.Message)
	return ce
}

func orUnset(s string) string {
	if s == "" {
		return "(unset)"
	}
	return s
}

// runRequest builds the RunInstances request of req.
func runRequest(req ports.CreateRequest) (*cvm.RunInstancesRequest, error) {
	r := cvm.NewRunInstancesRequest()
	if p := strings.TrimSpace(req.Parameters); p != "" {
		if err := r.FromJsonString(p); err != nil {
			return nil, ports.NewInvalidParametersError("InvalidTemplate",
				fmt.Sprintf("template %q: parameters are not a valid RunInstances request: %v", req.Template, err))
		}
	}
	r.InstanceCount = common.Int64Ptr(int64(req.Count))
	r.ClientToken = common.StringPtr(req.ClientToken)
	r.TagSpecification = withTags(r.TagSpecification, req.Tags)
	return r, nil
}

// withTags adds tags to the "instance" tag specification, replacing any
// nodesmith tag the template set itself (ours are authoritative, and a
// duplicate key is an API error).
func withTags(specs []*cvm.TagSpecification, tags []domain.Tag) []*cvm.TagSpecification {
	var inst *cvm.TagSpecification
	for _, s := range specs {
		if s != nil && s.ResourceType != nil && *s.ResourceType == "instance" {
			inst = s
			break
		}
	}
	if inst == nil {
		inst = &cvm.TagSpecification{ResourceType: common.StringPtr("instance")}
		specs = append(specs, inst)
	}
	kept := inst.Tags[:0]
	for _, t := range inst.Tags {
		if t != nil && t.Key != nil && !strings.HasPrefix(*t.Key, domain.TagPrefix) {
			kept = append(kept, t)
		}
	}
	for _, t := range tags {
		kept = append(kept, &cvm.Tag{Key: common.StringPtr(t.Key), Value: common.StringPtr(t.Value)})
	}
	inst.Tags = kept
	return specs
}

// Describe implements ports.Cloud with one DescribeInstances call.
func (c *Cloud) Describe(ctx context.Context, t ports.Target, ids []string) ([]domain.Status, error) {
	return c.base.Describe(ctx, t, ids, ActionDescribeInstances, func(ctx context.Context, api API) ([]domain.Status, error) {
		r := cvm.NewDescribeInstancesRequest()
		r.InstanceIds = common.StringPtrs(ids)
		r.Limit = common.Int64Ptr(pageSize)
		resp, err := api.DescribeInstancesWithContext(ctx, r)
		return statuses(resp), err
	})
}

// Terminate implements ports.Cloud. TerminateInstances refuses the whole
// call when any VM is already gone or terminating (goneCodes), so on such
// an answer the VMs are described and only those still there are
// terminated.
func (c *Cloud) Terminate(ctx context.Context, t ports.Target, ids []string) error {
	return c.base.Terminate(ctx, t, ids, ActionTerminateInstances, goneCodes.Has, c.Describe, func(ctx context.Context, api API, ids []string) error {
		r := cvm.NewTerminateInstancesRequest()
		r.InstanceIds = common.StringPtrs(ids)
		_, err := api.TerminateInstancesWithContext(ctx, r)
		return err
	})
}

// ListByTag implements ports.Cloud, paging DescribeInstances with the
// tag:nodesmith:cluster filter. Pages are by offset, so VMs created or
// terminated while the pages are read shift the later pages and a VM could
// be missed; lifecycle would take a missed VM for a vanished one and close
// its record. A listing whose TotalCount changed between pages is therefore
// read again, and reported as a transient error if it keeps changing.
func (c *Cloud) ListByTag(ctx context.Context, t ports.Target, clusterID string) ([]domain.Status, error) {
	for range listAttempts {
		out, consistent, err := c.listByTagOnce(ctx, t, clusterID)
		if err != nil || consistent {
			return out, err
		}
		c.base.Logger().Info("inventory changed while it was listed, listing again", "cluster", clusterID, "account", t.Account, "region", t.Region)
	}
	return nil, ports.NewTransientError("InventoryChanging", fmt.Sprintf("the instances of cluster %s kept changing during %d listings", clusterID, listAttempts))
}

// listAttempts bounds the listings ListByTag tries for a consistent one.
const listAttempts = 3

func (c *Cloud) listByTagOnce(ctx context.Context, t ports.Target, clusterID string) ([]domain.Status, bool, error) {
	var out []domain.Status
	firstTotal := int64(-1)
	consistent := true
	err := cloudcall.ListPages(clusterID, func(page int) (bool, error) {
		var got []domain.Status
		var total int64
		err := c.base.Call(ctx, t, ActionDescribeInstances, func(ctx context.Context, api API) error {
			r := cvm.NewDescribeInstancesRequest()
			r.Filters = []*cvm.Filter{{Name: common.StringPtr("tag:" + domain.TagCluster), Values: common.StringPtrs([]string{clusterID})}}
			r.Offset = common.Int64Ptr(int64(page * pageSize))
			r.Limit = common.Int64Ptr(pageSize)
			resp, err := api.DescribeInstancesWithContext(ctx, r)
			if err != nil {
				return err
			}
			got = statuses(resp)
			if resp.Response != nil && resp.Response.TotalCount != nil {
				total = *resp.Response.TotalCount
			}
			return nil
		})
		if err != nil {
			return false, err
		}
		if firstTotal < 0 {
			firstTotal = total
		} else if total != firstTotal {
			consistent = false
			return true, nil
		}
		out = append(out, got...)
		return len(got) < pageSize || int64(len(out)) >= total, nil
	})
	if err != nil || !consistent {
		return nil, false, err
	}
	return out, true, nil
}

func statuses(resp *cvm.DescribeInstancesResponse) []domain.Status {
	if resp == nil || resp.Response == nil {
		return nil
	}
	out := make([]domain.Status, 0, len(resp.Response.InstanceSet))
	for _, in := range resp.Response.InstanceSet {
		if in == nil || in.InstanceId == nil {
			continue
		}
		st := domain.Status{CloudID: *in.InstanceId, State: state(deref(in.InstanceState)), Tags: map[string]string{}}
		for _, ip := range in.PrivateIpAddresses {
			if ip != nil && *ip != "" {
				st.PrivateIP = *ip
				break
			}
		}
		if in.Placement != nil {
			st.Zone = deref(in.Placement.Zone)
		}
		if ts, err := time.Parse(time.RFC3339, deref(in.CreatedTime)); err == nil {
			st.CreatedAt = ts
		}
		if st.State == domain.StateLaunchFailed {
			st.LaunchError = launchError(deref(in.LatestOperationErrorMsg), st.Zone, deref(in.InstanceType))
		}
		for _, tag := range in.Tags {
			if tag != nil && tag.Key != nil {
				st.Tags[*tag.Key] = deref(tag.Value)
			}
		}
		out = append(out, st)
	}
	return out
}

// state maps CVM's InstanceState.
func state(s string) domain.State {
	switch s {
	case "PENDING", "STARTING", "REBOOTING":
		// On their way to RUNNING; an instance being created reports PENDING.
		return domain.StatePending
	case "RUNNING":
		return domain.StateRunning
	case "LAUNCH_FAILED":
		return domain.StateLaunchFailed
	case "STOPPED", "STOPPING":
		return domain.StateStopped
	case "SHUTDOWN", "TERMINATING":
		// SHUTDOWN is "stopped, awaiting destruction".
		return domain.StateTerminating
	default:
		return domain.StateUnknown
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
