package tencent

import (
	"context"
	"strings"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// armFamilies are Tencent's ARM instance families (Ampere Altra, Kunpeng);
// a CpuType naming an ARM processor counts too.
var armFamilies = map[string]bool{"SR1": true, "SR2": true, "KC1": true}

var armCPUs = []string{"ampere", "kunpeng", "yitian"}

// InstanceShapes implements ports.InstanceShapes with one
// DescribeZoneInstanceConfigInfos call, filtered by zones, types and the
// pay-as-you-go charge type (one item per zone and type; SoldOut is the
// on-demand catalogue's). GPUs are the answer's Gpu count, their model the
// GPU family ("GN7"); the architecture is arm64 for ARM families or a CPU
// type naming an ARM processor, else amd64.
func (c *Cloud) InstanceShapes(ctx context.Context, t ports.Target, zones, types []string) ([]domain.InstanceShape, error) {
	if err := ports.CheckShapeQuery(zones, types); err != nil {
		return nil, err
	}
	var out []domain.InstanceShape
	err := c.base.Call(ctx, t, ActionDescribeZoneInstanceConfigInfos, func(ctx context.Context, api API) error {
		r := cvm.NewDescribeZoneInstanceConfigInfosRequest()
		r.Filters = []*cvm.Filter{
			{Name: common.StringPtr("zone"), Values: common.StringPtrs(zones)},
			{Name: common.StringPtr("instance-type"), Values: common.StringPtrs(types)},
			{Name: common.StringPtr("instance-charge-type"), Values: common.StringPtrs([]string{"POSTPAID_BY_HOUR"})},
		}
		resp, err := api.DescribeZoneInstanceConfigInfosWithContext(ctx, r)
		if err != nil {
			return err
		}
		out = shapes(resp)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func shapes(resp *cvm.DescribeZoneInstanceConfigInfosResponse) []domain.InstanceShape {
	if resp == nil || resp.Response == nil {
		return nil
	}
	seen := map[[2]string]bool{}
	var out []domain.InstanceShape
	for _, it := range resp.Response.InstanceTypeQuotaSet {
		if it == nil || it.Zone == nil || it.InstanceType == nil {
			continue
		}
		k := [2]string{*it.Zone, *it.InstanceType}
		if seen[k] {
			continue // another charge type of the same zone and type
		}
		seen[k] = true
		s := domain.InstanceShape{
			Zone: *it.Zone, InstanceType: *it.InstanceType, Family: deref(it.InstanceFamily),
			VCPU: int(val64(it.Cpu)), MemoryMiB: val64(it.Memory) * 1024, GPU: int(val64(it.Gpu)),
			Arch: domain.ArchAMD64, SoldOut: deref(it.Status) == "SOLD_OUT",
		}
		if s.GPU > 0 {
			s.GPUModel = s.Family
		}
		cpu := strings.ToLower(deref(it.CpuType))
		if armFamilies[s.Family] || containsAny(cpu, armCPUs) {
			s.Arch = domain.ArchARM64
		}
		out = append(out, s)
	}
	return out
}

func containsAny(s string, words []string) bool {
	for _, w := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

func val64(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
