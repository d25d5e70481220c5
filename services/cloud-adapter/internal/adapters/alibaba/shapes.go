package alibaba

import (
	"context"
	"fmt"
	"math"
	"slices"

	ecs "github.com/alibabacloud-go/ecs-20140526/v7/client"
	"github.com/alibabacloud-go/tea/dara"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

var _ ports.InstanceShapes = (*Cloud)(nil)

// Limits of the ECS shape calls.
const (
	// maxTypesPerDescribe is DescribeInstanceTypes' InstanceTypes.N limit.
	maxTypesPerDescribe = 10
	// maxTypePages bounds DescribeInstanceTypes' NextToken pages per call
	// (at most 10 types fit one page of 1600; a cloud that keeps paging
	// is not followed forever).
	maxTypePages = 10
)

// InstanceShapes implements ports.InstanceShapes with ECS's two catalogue
// calls: DescribeAvailableResource (DestinationResource InstanceType,
// pay-as-you-go, not spot) once per zone for the types the zone offers,
// then DescribeInstanceTypes, 10 types a call, for the shapes of the
// offered ones. A type the zone lists is offered whatever its stock: a
// SoldOut status (StatusCategory WithoutStock or ClosedWithoutStock)
// marks the shape SoldOut, a capacity condition for the caller's fallback,
// not a shape error (as the Tencent adapter's SOLD_OUT). A zone ECS does
// not know (InvalidZoneId.NotFound) offers nothing. GPUs are GPUAmount,
// their model GPUSpec ("NVIDIA A10"); CpuArchitecture ARM is arm64,
// anything else amd64. Calls are paced and retried as the adapter's
// others; the app caches the answers.
func (c *Cloud) InstanceShapes(ctx context.Context, t ports.Target, zones, types []string) ([]domain.InstanceShape, error) {
	if err := ports.CheckShapeQuery(zones, types); err != nil {
		return nil, err
	}
	zones, types = dedupe(zones), dedupe(types)
	offered := map[string]map[string]bool{} // zone -> type -> sold out
	var need []string
	for _, z := range zones {
		o, err := c.offered(ctx, t, z, types)
		if err != nil {
			return nil, fmt.Errorf("DescribeAvailableResource (zone %s): %w", z, err)
		}
		offered[z] = o
		for ty := range o {
			if !slices.Contains(need, ty) {
				need = append(need, ty)
			}
		}
	}
	slices.Sort(need)
	specs := map[string]*ecs.DescribeInstanceTypesResponseBodyInstanceTypesInstanceType{}
	for chunk := range slices.Chunk(need, maxTypesPerDescribe) {
		if err := c.describeTypes(ctx, t, chunk, specs); err != nil {
			return nil, fmt.Errorf("DescribeInstanceTypes (%d types): %w", len(chunk), err)
		}
	}
	var out []domain.InstanceShape
	for _, z := range zones {
		for _, ty := range types {
			soldOut, ok := offered[z][ty]
			spec := specs[ty]
			if !ok || spec == nil {
				continue // not offered in the zone, or ECS does not describe it
			}
			out = append(out, shape(z, ty, spec, soldOut))
		}
	}
	return out, nil
}

// offered asks which of types zone offers, and whether each is sold out.
func (c *Cloud) offered(ctx context.Context, t ports.Target, zone string, types []string) (map[string]bool, error) {
	out := map[string]bool{}
	err := c.base.Call(ctx, t, ActionDescribeAvailableResource, func(ctx context.Context, api API) error {
		clear(out) // a retry starts over
		resp, err := api.DescribeAvailableResourceWithContext(ctx, &ecs.DescribeAvailableResourceRequest{
			RegionId:            dara.String(t.Region),
			DestinationResource: dara.String("InstanceType"),
			ZoneId:              dara.String(zone),
			InstanceChargeType:  dara.String("PostPaid"),
			SpotStrategy:        dara.String("NoSpot"),
		}, runtime())
		if err != nil {
			return err
		}
		if resp == nil || resp.Body == nil || resp.Body.AvailableZones == nil {
			return nil
		}
		for _, az := range resp.Body.AvailableZones.AvailableZone {
			if az == nil || dara.StringValue(az.ZoneId) != zone || az.AvailableResources == nil {
				continue
			}
			for _, ar := range az.AvailableResources.AvailableResource {
				if ar == nil || dara.StringValue(ar.Type) != "InstanceType" || ar.SupportedResources == nil {
					continue
				}
				for _, sr := range ar.SupportedResources.SupportedResource {
					if sr == nil || !slices.Contains(types, dara.StringValue(sr.Value)) {
						continue
					}
					out[*sr.Value] = soldOut(dara.StringValue(sr.Status), dara.StringValue(sr.StatusCategory))
				}
			}
		}
		return nil
	})
	if ce, ok := ports.AsCloudError(err); ok && ce.Code == "InvalidZoneId.NotFound" {
		return map[string]bool{}, nil
	}
	return out, err
}

// soldOut reads DescribeAvailableResource's stock status: SoldOut, or a
// category without stock.
func soldOut(status, category string) bool {
	return status == "SoldOut" || category == "WithoutStock" || category == "ClosedWithoutStock"
}

// describeTypes adds the specs of types (at most 10) to specs, following
// NextToken.
func (c *Cloud) describeTypes(ctx context.Context, t ports.Target, types []string,
	specs map[string]*ecs.DescribeInstanceTypesResponseBodyInstanceTypesInstanceType,
) error {
	var token *string
	for range maxTypePages {
		var next *string
		err := c.base.Call(ctx, t, ActionDescribeInstanceTypes, func(ctx context.Context, api API) error {
			resp, err := api.DescribeInstanceTypesWithContext(ctx, &ecs.DescribeInstanceTypesRequest{
				InstanceTypes: dara.StringSlice(types),
				NextToken:     token,
			}, runtime())
			if err != nil {
				return err
			}
			next = nil
			if resp == nil || resp.Body == nil {
				return nil
			}
			if resp.Body.InstanceTypes != nil {
				for _, it := range resp.Body.InstanceTypes.InstanceType {
					if it != nil && slices.Contains(types, dara.StringValue(it.InstanceTypeId)) {
						specs[*it.InstanceTypeId] = it
					}
				}
			}
			if dara.StringValue(resp.Body.NextToken) != "" {
				next = resp.Body.NextToken
			}
			return nil
		})
		if err != nil || next == nil {
			return err
		}
		token = next
	}
	return ports.NewCloudError(ports.ErrorKindTransient, "TooManyPages",
		fmt.Sprintf("DescribeInstanceTypes kept paging after %d pages", maxTypePages))
}

// shape is the domain shape of spec in zone.
func shape(zone, instanceType string, spec *ecs.DescribeInstanceTypesResponseBodyInstanceTypesInstanceType, soldOut bool) domain.InstanceShape {
	s := domain.InstanceShape{
		Zone: zone, InstanceType: instanceType, Family: dara.StringValue(spec.InstanceTypeFamily),
		VCPU:      int(dara.Int32Value(spec.CpuCoreCount)),
		MemoryMiB: int64(math.Round(float64(dara.Float32Value(spec.MemorySize)) * 1024)),
		GPU:       int(dara.Int32Value(spec.GPUAmount)),
		Arch:      domain.ArchAMD64,
		SoldOut:   soldOut,
	}
	if s.GPU > 0 {
		s.GPUModel = dara.StringValue(spec.GPUSpec)
		if s.GPUModel == "" {
			s.GPUModel = s.Family
		}
	}
	if dara.StringValue(spec.CpuArchitecture) == "ARM" {
		s.Arch = domain.ArchARM64
	}
	return s
}

// dedupe returns s without repeats, in order.
func dedupe(s []string) []string {
	out := make([]string, 0, len(s))
	for _, v := range s {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}
