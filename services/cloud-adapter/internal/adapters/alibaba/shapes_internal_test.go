package alibaba

import (
	"context"
	"net/http"
	"testing"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

func availableIn(zone string, types map[string]string) func(map[string]string) (int, any) {
	return func(p map[string]string) (int, any) {
		var srs []map[string]string
		for ty, status := range types {
			cat := "WithStock"
			if status == "SoldOut" {
				cat = "WithoutStock"
			}
			srs = append(srs, map[string]string{"Value": ty, "Status": status, "StatusCategory": cat})
		}
		return http.StatusOK, map[string]any{"RequestId": "r", "AvailableZones": map[string]any{"AvailableZone": []any{
			map[string]any{"ZoneId": zone, "RegionId": p["RegionId"], "Status": "Available", "AvailableResources": map[string]any{
				"AvailableResource": []any{map[string]any{"Type": "InstanceType", "SupportedResources": map[string]any{"SupportedResource": srs}}},
			}},
		}}}
	}
}

// TestInstanceShapesPagesAndMaps: the request parameters ECS needs, the
// NextToken pages of DescribeInstanceTypes followed, fractional GiB and a
// GPU without GPUSpec mapped, a type listed but not described left out.
func TestInstanceShapesPagesAndMaps(t *testing.T) {
	c, f := newCloud(t, opts{})
	f.on(ActionDescribeAvailableResource, availableIn("cn-hangzhou-h", map[string]string{
		"ecs.t5-lc2m1.nano": "Available", "ecs.gn5-x.large": "SoldOut", "ecs.ghost.large": "Available",
	}))
	f.on(ActionDescribeInstanceTypes, func(p map[string]string) (int, any) {
		if p["NextToken"] == "" {
			return http.StatusOK, map[string]any{"RequestId": "r", "NextToken": "p2", "InstanceTypes": map[string]any{"InstanceType": []any{
				map[string]any{"InstanceTypeId": "ecs.t5-lc2m1.nano", "InstanceTypeFamily": "ecs.t5", "CpuCoreCount": 1, "MemorySize": 0.5, "CpuArchitecture": "X86"},
			}}}
		}
		return http.StatusOK, map[string]any{"RequestId": "r", "InstanceTypes": map[string]any{"InstanceType": []any{
			map[string]any{"InstanceTypeId": "ecs.gn5-x.large", "InstanceTypeFamily": "ecs.gn5", "CpuCoreCount": 4, "MemorySize": 30, "GPUAmount": 1, "CpuArchitecture": "X86"},
		}}}
	})
	got, err := c.InstanceShapes(context.Background(), target, []string{"cn-hangzhou-h"}, []string{"ecs.t5-lc2m1.nano", "ecs.gn5-x.large", "ecs.ghost.large", "ecs.gone.large"})
	if err != nil {
		t.Fatal(err)
	}
	want := []domain.InstanceShape{
		{Zone: "cn-hangzhou-h", InstanceType: "ecs.t5-lc2m1.nano", Family: "ecs.t5", VCPU: 1, MemoryMiB: 512, Arch: domain.ArchAMD64},
		{Zone: "cn-hangzhou-h", InstanceType: "ecs.gn5-x.large", Family: "ecs.gn5", VCPU: 4, MemoryMiB: 30720, GPU: 1, GPUModel: "ecs.gn5", Arch: domain.ArchAMD64, SoldOut: true},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("InstanceShapes = %+v, want %+v", got, want)
	}
	ar := f.callsOf(ActionDescribeAvailableResource)
	if len(ar) != 1 || ar[0].params["DestinationResource"] != "InstanceType" || ar[0].params["ZoneId"] != "cn-hangzhou-h" ||
		ar[0].params["RegionId"] != "cn-hangzhou" || ar[0].params["InstanceChargeType"] != "PostPaid" {
		t.Fatalf("DescribeAvailableResource calls %+v", ar)
	}
	it := f.callsOf(ActionDescribeInstanceTypes)
	if len(it) != 2 || it[1].params["NextToken"] != "p2" || it[0].params["InstanceTypes.1"] == "" || it[0].params["InstanceTypes.4"] != "" {
		t.Fatalf("DescribeInstanceTypes calls %+v", it)
	}
}

// TestInstanceShapesPageBound: a DescribeInstanceTypes that never stops
// paging is not followed forever.
func TestInstanceShapesPageBound(t *testing.T) {
	c, f := newCloud(t, opts{})
	f.on(ActionDescribeAvailableResource, availableIn("cn-hangzhou-h", map[string]string{"ecs.g7.large": "Available"}))
	f.on(ActionDescribeInstanceTypes, func(map[string]string) (int, any) {
		return http.StatusOK, map[string]any{"RequestId": "r", "NextToken": "again", "InstanceTypes": map[string]any{"InstanceType": []any{}}}
	})
	_, err := c.InstanceShapes(context.Background(), target, []string{"cn-hangzhou-h"}, []string{"ecs.g7.large"})
	if ce, ok := ports.AsCloudError(err); !ok || ce.Code != "TooManyPages" {
		t.Fatalf("endless paging = %v, want TooManyPages", err)
	}
	if n := len(f.callsOf(ActionDescribeInstanceTypes)); n != maxTypePages {
		t.Fatalf("%d pages asked, want %d", n, maxTypePages)
	}
}

// TestInstanceShapesUnknownZoneOffersNothing: InvalidZoneId.NotFound for
// one zone leaves it out; the others answer.
func TestInstanceShapesUnknownZoneOffersNothing(t *testing.T) {
	c, f := newCloud(t, opts{})
	ok := availableIn("cn-hangzhou-h", map[string]string{"ecs.g7.large": "Available"})
	f.on(ActionDescribeAvailableResource, func(p map[string]string) (int, any) {
		if p["ZoneId"] != "cn-hangzhou-h" {
			return http.StatusNotFound, map[string]string{"Code": "InvalidZoneId.NotFound", "Message": "no zone", "RequestId": "r"}
		}
		return ok(p)
	})
	f.on(ActionDescribeInstanceTypes, func(map[string]string) (int, any) {
		return http.StatusOK, map[string]any{"RequestId": "r", "InstanceTypes": map[string]any{"InstanceType": []any{
			map[string]any{"InstanceTypeId": "ecs.g7.large", "InstanceTypeFamily": "ecs.g7", "CpuCoreCount": 2, "MemorySize": 8, "CpuArchitecture": "X86"},
		}}}
	})
	got, err := c.InstanceShapes(context.Background(), target, []string{"cn-hangzhou-x", "cn-hangzhou-h"}, []string{"ecs.g7.large"})
	if err != nil || len(got) != 1 || got[0].Zone != "cn-hangzhou-h" {
		t.Fatalf("InstanceShapes = %+v, %v", got, err)
	}
}
