// Package alibaba implements ports.Cloud for Alibaba Cloud ECS with the
// official Alibaba Cloud SDK V2.0 for Go (github.com/alibabacloud-go/
// ecs-20140526, the generation Alibaba maintains for new code; V1.0,
// aliyun/alibaba-cloud-sdk-go, is out of support). Pacing, timeouts,
// bounded retries, metrics and spans are internal/cloudcall's, shared with
// the Tencent adapter; ECS error codes become the port's kinds in one place
// (errors.go).
package alibaba

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	ecs "github.com/alibabacloud-go/ecs-20140526/v7/client"
	"github.com/alibabacloud-go/tea/dara"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/cloudcall"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ratelimit"
)

// Provider is the name commands use for Alibaba Cloud.
const Provider = cloudspec.Alibaba

// spec is Alibaba Cloud's template rules.
var spec, _ = cloudspec.Lookup(Provider)

// ECS API actions.
const (
	ActionRunInstances      = "RunInstances"
	ActionDescribeInstances = "DescribeInstances"
	ActionDeleteInstances   = "DeleteInstances"
	ActionTagResources      = "TagResources"

	ActionDescribeInstanceTypes     = "DescribeInstanceTypes"
	ActionDescribeAvailableResource = "DescribeAvailableResource"
)

// DefaultLimits stay below ECS's default per-account flow control
// (RunInstances and DeleteInstances a few tens per second,
// DescribeInstances more), leaving room for other clients of the account.
func DefaultLimits() ratelimit.Limits {
	return ratelimit.Limits{
		ActionRunInstances:      {Rate: 8, Burst: 2},
		ActionDeleteInstances:   {Rate: 8, Burst: 2},
		ActionDescribeInstances: {Rate: 16, Burst: 4},
		ActionTagResources:      {Rate: 8, Burst: 2},
		// Shape questions: one DescribeAvailableResource per zone asked,
		// then DescribeInstanceTypes per 10 types; rare (answers are
		// cached by the app), a small burst for a multi-zone template.
		ActionDescribeAvailableResource: {Rate: 8, Burst: 4},
		ActionDescribeInstanceTypes:     {Rate: 8, Burst: 4},
	}
}

// pageSize is DescribeInstances' maximum MaxResults.
const pageSize = 100

// maxTags is the most tags an ECS resource carries.
const maxTags = 20

// Options configure a Cloud: its SDK clients, and pacing, retries and
// timeouts (nil Limits means DefaultLimits).
type Options = cloudcall.AdapterOptions[API]

// Cloud is the Alibaba Cloud ECS adapter.
type Cloud struct {
	base *cloudcall.Adapter[API]
}

var _ ports.Cloud = (*Cloud)(nil)

// New returns a Cloud.
func New(o Options) *Cloud {
	return &Cloud{base: cloudcall.NewAdapter(cloudcall.Profile{
		Provider: Provider, RPCSystem: Provider, Service: "ecs", Classify: classify, DefaultLimits: DefaultLimits(),
	}, o)}
}

// runtime: no SDK-side retries (ours are bounded and rate-limited).
func runtime() *dara.RuntimeOptions { return &dara.RuntimeOptions{} }

// CreateBatch implements ports.Cloud with one RunInstances call: the
// template is the command's parameters_json decoded into the SDK request,
// then RegionId, Amount, ClientToken and nodesmith's tags are set over it.
func (c *Cloud) CreateBatch(ctx context.Context, req ports.CreateRequest) ([]string, error) {
	return cloudcall.Create(ctx, c.base, req, ActionRunInstances, runRequest, func(ctx context.Context, api API, r *ecs.RunInstancesRequest) ([]string, error) {
		resp, err := api.RunInstancesWithContext(ctx, r, runtime())
		if err != nil {
			return nil, err
		}
		// A count other than Amount (without MinAmount, all or nothing) is
		// the app's UnexpectedInstanceCount, for every cloud.
		if resp == nil || resp.Body == nil || resp.Body.InstanceIdSets == nil {
			return nil, nil
		}
		return dara.StringSliceValue(resp.Body.InstanceIdSets.InstanceIdSet), nil
	})
}

// runRequest builds the RunInstances request of req.
func runRequest(req ports.CreateRequest) (*ecs.RunInstancesRequest, error) {
	// The gateway and the configuration loader validated the template
	// with the same rules; a command from elsewhere gets the same answer.
	if errs := spec.ValidateParameters(req.Parameters); len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return nil, ports.NewInvalidParametersError("InvalidTemplate",
			fmt.Sprintf("template %q: %s", req.Template, strings.Join(msgs, "; ")))
	}
	r := &ecs.RunInstancesRequest{}
	if p := strings.TrimSpace(req.Parameters); p != "" {
		dec := json.NewDecoder(bytes.NewReader([]byte(p)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(r); err != nil {
			return nil, ports.NewInvalidParametersError("InvalidTemplate",
				fmt.Sprintf("template %q: parameters are not a valid ECS RunInstances request: %v", req.Template, err))
		}
	}
	r.RegionId = dara.String(req.Target.Region)
	r.Amount = dara.Int32(int32(req.Count)) //nolint:gosec // 1..MaxBatch, checked
	// MinAmount would let ECS create fewer VMs than the batch expects
	// (cloudspec refuses it in templates too).
	r.MinAmount = nil
	r.DryRun = nil
	r.ClientToken = dara.String(req.ClientToken)
	r.Tag = withTags(r.Tag, req.Tags)
	if len(r.Tag) > maxTags {
		return nil, ports.NewInvalidParametersError("InvalidTagCount",
			fmt.Sprintf("template %q: %d tags with nodesmith's, ECS allows %d", req.Template, len(r.Tag), maxTags))
	}
	return r, nil
}

// withTags adds tags, replacing any nodesmith tag the template set itself
// (ours are authoritative, and a duplicate key is an API error).
func withTags(tags []*ecs.RunInstancesRequestTag, ours []domain.Tag) []*ecs.RunInstancesRequestTag {
	kept := tags[:0:0]
	for _, t := range tags {
		if t != nil && t.Key != nil && !strings.HasPrefix(*t.Key, domain.TagPrefix) {
			kept = append(kept, t)
		}
	}
	for _, t := range ours {
		kept = append(kept, &ecs.RunInstancesRequestTag{Key: dara.String(t.Key), Value: dara.String(t.Value)})
	}
	return kept
}

// Describe implements ports.Cloud with one DescribeInstances call.
func (c *Cloud) Describe(ctx context.Context, t ports.Target, ids []string) ([]domain.Status, error) {
	return c.base.Describe(ctx, t, ids, ActionDescribeInstances, func(ctx context.Context, api API) ([]domain.Status, error) {
		idsJSON, err := json.Marshal(ids)
		if err != nil {
			return nil, ports.NewInvalidParametersError("InvalidInstanceIds", err.Error())
		}
		resp, err := api.DescribeInstancesWithContext(ctx, &ecs.DescribeInstancesRequest{
			RegionId:    dara.String(t.Region),
			InstanceIds: dara.String(string(idsJSON)),
			MaxResults:  dara.Int32(pageSize),
		}, runtime())
		return statuses(resp), err
	})
}

// Terminate implements ports.Cloud with DeleteInstances and Force (a
// running VM is stopped and released at once). DeleteInstances refuses the
// whole call when any VM is already gone or being released (goneCodes), so
// on such an answer the VMs are described and only those still there and
// not going are deleted.
func (c *Cloud) Terminate(ctx context.Context, t ports.Target, ids []string) error {
	return c.base.Terminate(ctx, t, ids, ActionDeleteInstances, goneCodes.Has, c.Describe, func(ctx context.Context, api API, ids []string) error {
		_, err := api.DeleteInstancesWithContext(ctx, &ecs.DeleteInstancesRequest{
			RegionId:   dara.String(t.Region),
			InstanceId: dara.StringSlice(ids),
			Force:      dara.Bool(true),
		}, runtime())
		return err
	})
}

// maxTagResources and maxTagsPerCall are TagResources' limits per call.
const (
	maxTagResources = 50
	maxTagsPerCall  = 20
)

// Tag sets tags on existing VMs (ports.Cloud's Tag, for explicit
// adoption) with ECS TagResources: up to 50 instances and 20 tags per call,
// a key already on an instance gets the new value, its other tags stay.
// An instance that does not exist fails the call (not found).
func (c *Cloud) Tag(ctx context.Context, t ports.Target, ids []string, tags []domain.Tag) error {
	if err := cloudcall.CheckIDs(ids); err != nil {
		return err
	}
	if len(ids) == 0 || len(tags) == 0 {
		return nil
	}
	for chunk := range slices.Chunk(ids, maxTagResources) {
		for tagChunk := range slices.Chunk(tags, maxTagsPerCall) {
			err := c.base.Call(ctx, t, ActionTagResources, func(ctx context.Context, api API) error {
				r := &ecs.TagResourcesRequest{
					RegionId:     dara.String(t.Region),
					ResourceType: dara.String("instance"),
					ResourceId:   dara.StringSlice(chunk),
				}
				for _, tg := range tagChunk {
					r.Tag = append(r.Tag, &ecs.TagResourcesRequestTag{Key: dara.String(tg.Key), Value: dara.String(tg.Value)})
				}
				_, err := api.TagResourcesWithContext(ctx, r, runtime())
				return err
			})
			if err != nil {
				return fmt.Errorf("TagResources (%d ids): %w", len(chunk), err)
			}
		}
	}
	return nil
}

// ListByTag implements ports.Cloud, paging DescribeInstances with the
// nodesmith:cluster tag filter. Pages are chained by NextToken, a cursor
// (not an offset), so VMs created or deleted while the pages are read do
// not shift the later pages.
func (c *Cloud) ListByTag(ctx context.Context, t ports.Target, clusterID string) ([]domain.Status, error) {
	var out []domain.Status
	seen := map[string]bool{}
	next := ""
	err := cloudcall.ListPages(clusterID, func(int) (bool, error) {
		var got []domain.Status
		var token string
		err := c.base.Call(ctx, t, ActionDescribeInstances, func(ctx context.Context, api API) error {
			r := &ecs.DescribeInstancesRequest{
				RegionId:   dara.String(t.Region),
				Tag:        []*ecs.DescribeInstancesRequestTag{{Key: dara.String(domain.TagCluster), Value: dara.String(clusterID)}},
				MaxResults: dara.Int32(pageSize),
			}
			if next != "" {
				r.NextToken = dara.String(next)
			}
			resp, err := api.DescribeInstancesWithContext(ctx, r, runtime())
			if err != nil {
				return err
			}
			got = statuses(resp)
			if resp != nil && resp.Body != nil {
				token = dara.StringValue(resp.Body.NextToken)
			}
			return nil
		})
		if err != nil {
			return false, err
		}
		for _, st := range got {
			// A tag filter is a filter: an answer that ignores it must not
			// hand us another cluster's VMs.
			if st.Tags[domain.TagCluster] != clusterID || seen[st.CloudID] {
				continue
			}
			seen[st.CloudID] = true
			out = append(out, st)
		}
		if token != "" && token == next {
			return false, ports.NewTransientError("PagingStuck", "DescribeInstances returned the same NextToken twice")
		}
		next = token
		return token == "", nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func statuses(resp *ecs.DescribeInstancesResponse) []domain.Status {
	if resp == nil || resp.Body == nil || resp.Body.Instances == nil {
		return nil
	}
	out := make([]domain.Status, 0, len(resp.Body.Instances.Instance))
	for _, in := range resp.Body.Instances.Instance {
		if in == nil || in.InstanceId == nil {
			continue
		}
		st := domain.Status{
			CloudID:   *in.InstanceId,
			State:     state(dara.StringValue(in.Status)),
			Zone:      dara.StringValue(in.ZoneId),
			PrivateIP: privateIP(in),
			CreatedAt: createdAt(dara.StringValue(in.CreationTime)),
			Tags:      map[string]string{},
		}
		if in.Tags != nil {
			for _, tag := range in.Tags.Tag {
				if tag != nil && tag.TagKey != nil {
					st.Tags[*tag.TagKey] = dara.StringValue(tag.TagValue)
				}
			}
		}
		out = append(out, st)
	}
	return out
}

// privateIP is the VM's primary private address: the VPC's, else the
// primary network interface's, else the classic network's.
func privateIP(in *ecs.DescribeInstancesResponseBodyInstancesInstance) string {
	if v := in.VpcAttributes; v != nil && v.PrivateIpAddress != nil {
		for _, ip := range v.PrivateIpAddress.IpAddress {
			if s := dara.StringValue(ip); s != "" {
				return s
			}
		}
	}
	if n := in.NetworkInterfaces; n != nil {
		for _, ni := range n.NetworkInterface {
			if ni != nil && dara.StringValue(ni.PrimaryIpAddress) != "" {
				return *ni.PrimaryIpAddress
			}
		}
	}
	if in.InnerIpAddress != nil {
		for _, ip := range in.InnerIpAddress.IpAddress {
			if s := dara.StringValue(ip); s != "" {
				return s
			}
		}
	}
	return ""
}

// createdAt parses ECS's CreationTime ("2006-01-02T15:04Z", UTC, without
// seconds) or an RFC 3339 time.
func createdAt(s string) time.Time {
	for _, layout := range []string{"2006-01-02T15:04Z", time.RFC3339} {
		if ts, err := time.Parse(layout, s); err == nil {
			return ts
		}
	}
	return time.Time{}
}

// state maps ECS's instance Status.
func state(s string) domain.State {
	switch s {
	case "Pending", "Starting":
		// A VM being created reports Pending, then Starting, then Running.
		return domain.StatePending
	case "Running":
		return domain.StateRunning
	case "Stopping":
		// nodesmith never stops its VMs: a VM released with Force reports
		// Stopping until it vanishes (and refuses another DeleteInstances).
		return domain.StateTerminating
	case "Stopped":
		return domain.StateStopped
	default:
		return domain.StateUnknown
	}
}
