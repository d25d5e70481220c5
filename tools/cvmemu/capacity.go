package cvmemu

import (
	"fmt"
	"slices"
	"strings"

	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"
)

// Capacity: the instance type table, stock-outs per zone and type, and
// DescribeZoneInstanceConfigInfos, the catalogue of what each zone sells.

// ActionDescribeZoneInstanceConfigInfos lists the instance types each zone
// sells, with their shapes and whether they are sold out.
const ActionDescribeZoneInstanceConfigInfos = "DescribeZoneInstanceConfigInfos"

// InstanceType is one row of the emulator's instance type table: the
// shape DescribeZoneInstanceConfigInfos (CVM) and DescribeInstanceTypes
// (ECS) report. One table serves both front ends: rows named "ecs.*" are
// ECS's (IsECSType), the others CVM's; each front end lists only its own.
type InstanceType struct {
	InstanceType   string  // "S5.MEDIUM4"
	InstanceFamily string  // "S5"
	TypeName       string  // "Standard S5"
	CPU            int64   // cores
	Memory         int64   // GiB
	GPU            int64   // GPUs (the answer's Gpu)
	GPUCount       float64 // physical GPU cards (the answer's GpuCount; <1 for vGPU)
	GPUSpec        string  // GPU model ("NVIDIA A10"; ECS's GPUSpec), "" without GPUs
	CPUType        string  // processor model; ARM types name an ARM CPU (IsARM)
	// SpotPrice is the current spot price per hour; a spot launch with a
	// lower MaxPrice fails InvalidParameterValue.InsufficientPrice. 0: any.
	SpotPrice float64
	// NoSpot: the type cannot be bought as spot.
	NoSpot bool
}

// IsECSType tells an ECS instance type name ("ecs.g7.large") from a CVM
// one ("S5.MEDIUM4").
func IsECSType(name string) bool { return strings.HasPrefix(name, "ecs.") }

// armCPUs are the ARM processors the table's CPUType may name.
var armCPUs = []string{"ampere", "kunpeng", "yitian"}

// IsARM tells whether the type's processor is an ARM one (its CPUType
// names an ARM processor); the others are x86.
func (t InstanceType) IsARM() bool {
	cpu := strings.ToLower(t.CPUType)
	return slices.ContainsFunc(armCPUs, func(a string) bool { return strings.Contains(cpu, a) })
}

// DefaultInstanceTypes is the instance type table used when
// Config.InstanceTypes is empty: a few real families with their real
// shapes; for CVM Intel S5, AMD SA2, ARM SR1, GPU GN7 with one T4, for ECS
// Intel g7, c7, r7, g6 and c6, ARM g8y (Yitian 710), GPU gn7i (one A10)
// and gn6i (one T4). ECS zones offer the table's ECS types (an ECS type
// only its name describes is offered only where DescribeAvailableResource
// names it in InstanceType).
func DefaultInstanceTypes() []InstanceType {
	const intel, amd, arm = "Intel Xeon Cascade Lake 8255C", "AMD EPYC ROME", "Ampere Altra"
	const iceLake, cascade, yitian = "Intel Xeon(Ice Lake) Platinum 8369B", "Intel Xeon(Cascade Lake) Platinum 8269CY", "Yitian 710"
	s5 := func(t string, cpu, mem int64) InstanceType {
		return InstanceType{InstanceType: t, InstanceFamily: "S5", TypeName: "Standard S5", CPU: cpu, Memory: mem, CPUType: intel, SpotPrice: 0.01}
	}
	return []InstanceType{
		s5("S5.SMALL1", 1, 1), s5("S5.SMALL2", 1, 2), s5("S5.MEDIUM4", 2, 4), s5("S5.MEDIUM8", 2, 8),
		s5("S5.LARGE8", 4, 8), s5("S5.LARGE16", 4, 16), s5("S5.XLARGE16", 8, 16), s5("S5.2XLARGE16", 8, 16), s5("S5.2XLARGE32", 8, 32),
		{InstanceType: "SA2.MEDIUM4", InstanceFamily: "SA2", TypeName: "Standard SA2", CPU: 2, Memory: 4, CPUType: amd, SpotPrice: 0.01},
		{InstanceType: "SA2.LARGE8", InstanceFamily: "SA2", TypeName: "Standard SA2", CPU: 4, Memory: 8, CPUType: amd, SpotPrice: 0.01},
		{InstanceType: "SR1.MEDIUM4", InstanceFamily: "SR1", TypeName: "Standard ARM SR1", CPU: 2, Memory: 4, CPUType: arm, SpotPrice: 0.01},
		{InstanceType: "SR1.LARGE8", InstanceFamily: "SR1", TypeName: "Standard ARM SR1", CPU: 4, Memory: 8, CPUType: arm, SpotPrice: 0.01},
		{InstanceType: "GN7.2XLARGE32", InstanceFamily: "GN7", TypeName: "GPU Compute GN7", CPU: 8, Memory: 32, GPU: 1, GPUCount: 1, CPUType: intel, NoSpot: true},
		{InstanceType: "GN7.5XLARGE80", InstanceFamily: "GN7", TypeName: "GPU Compute GN7", CPU: 20, Memory: 80, GPU: 1, GPUCount: 1, CPUType: intel, NoSpot: true},

		{InstanceType: "ecs.g7.large", InstanceFamily: "ecs.g7", TypeName: "General Purpose g7", CPU: 2, Memory: 8, CPUType: iceLake, SpotPrice: 0.01},
		{InstanceType: "ecs.g7.xlarge", InstanceFamily: "ecs.g7", TypeName: "General Purpose g7", CPU: 4, Memory: 16, CPUType: iceLake, SpotPrice: 0.01},
		{InstanceType: "ecs.c7.large", InstanceFamily: "ecs.c7", TypeName: "Compute Optimized c7", CPU: 2, Memory: 4, CPUType: iceLake, SpotPrice: 0.01},
		{InstanceType: "ecs.c7.xlarge", InstanceFamily: "ecs.c7", TypeName: "Compute Optimized c7", CPU: 4, Memory: 8, CPUType: iceLake, SpotPrice: 0.01},
		{InstanceType: "ecs.r7.large", InstanceFamily: "ecs.r7", TypeName: "Memory Optimized r7", CPU: 2, Memory: 16, CPUType: iceLake, SpotPrice: 0.01},
		{InstanceType: "ecs.g8y.large", InstanceFamily: "ecs.g8y", TypeName: "General Purpose g8y", CPU: 2, Memory: 8, CPUType: yitian, SpotPrice: 0.01},
		{InstanceType: "ecs.gn7i-c8g1.2xlarge", InstanceFamily: "ecs.gn7i", TypeName: "GPU Compute gn7i", CPU: 8, Memory: 30, GPU: 1, GPUCount: 1, GPUSpec: "NVIDIA A10", CPUType: iceLake, NoSpot: true},
		{InstanceType: "ecs.g6.large", InstanceFamily: "ecs.g6", TypeName: "General Purpose g6", CPU: 2, Memory: 8, CPUType: cascade, SpotPrice: 0.01},
		{InstanceType: "ecs.g6.xlarge", InstanceFamily: "ecs.g6", TypeName: "General Purpose g6", CPU: 4, Memory: 16, CPUType: cascade, SpotPrice: 0.01},
		{InstanceType: "ecs.c6.large", InstanceFamily: "ecs.c6", TypeName: "Compute Optimized c6", CPU: 2, Memory: 4, CPUType: cascade, SpotPrice: 0.01},
		{InstanceType: "ecs.gn6i-c4g1.xlarge", InstanceFamily: "ecs.gn6i", TypeName: "GPU Compute gn6i", CPU: 4, Memory: 15, GPU: 1, GPUCount: 1, GPUSpec: "NVIDIA T4", CPUType: "Intel Xeon Platinum 8163", NoSpot: true},
	}
}

// instanceTypeInfo looks a type up in the table; a type not in it whose
// name gives its shape (InstanceShape) is a plain Intel type of the
// family its name starts with.
func (e *Emulator) instanceTypeInfo(name string) (InstanceType, bool) {
	if i := slices.IndexFunc(e.instanceTypes, func(t InstanceType) bool { return t.InstanceType == name }); i >= 0 {
		return e.instanceTypes[i], true
	}
	family, _, ok := strings.Cut(name, ".")
	if cpu, mem := InstanceShape(name); ok && cpu > 0 && shapePattern.MatchString(name) {
		return InstanceType{InstanceType: name, InstanceFamily: family, TypeName: family, CPU: cpu, Memory: mem, CPUType: "Intel Xeon"}, true
	}
	return InstanceType{}, false
}

// stockOutLocked returns the first stock-out rule matching a launch;
// atLaunch picks the rules that strike after the call (or those that
// refuse it).
func (e *Emulator) stockOutLocked(zone, instanceType, chargeType string, atLaunch bool) (StockOut, bool) {
	for _, so := range e.stockOuts {
		if so.AtLaunch == atLaunch && (so.Zone == "" || so.Zone == zone) &&
			(so.InstanceType == "" || so.InstanceType == instanceType) &&
			(so.ChargeType == "" || so.ChargeType == chargeType) {
			return so, true
		}
	}
	return StockOut{}, false
}

// code is the error code of a stock-out in a front end's dialect.
func (so StockOut) code(d dialect) string {
	if so.Code != "" {
		return so.Code
	}
	return d.noStock
}

func soldOutMessage(instanceType, zone string) string {
	return fmt.Sprintf("The specified instance type %s is sold out in zone %s.", instanceType, zone)
}

// Wire types of DescribeZoneInstanceConfigInfos (names as in the SDK's
// InstanceTypeQuotaItem).
type instanceTypeQuotaJSON struct {
	Zone               string         `json:"Zone"`
	InstanceType       string         `json:"InstanceType"`
	InstanceChargeType string         `json:"InstanceChargeType"`
	NetworkCard        int64          `json:"NetworkCard"`
	Externals          map[string]any `json:"Externals"`
	CPU                int64          `json:"Cpu"`
	Memory             int64          `json:"Memory"`
	InstanceFamily     string         `json:"InstanceFamily"`
	TypeName           string         `json:"TypeName"`
	LocalDiskTypeList  []any          `json:"LocalDiskTypeList"`
	Status             string         `json:"Status"`
	Price              map[string]any `json:"Price"`
	SoldOutReason      string         `json:"SoldOutReason"`
	InstanceBandwidth  float64        `json:"InstanceBandwidth"`
	InstancePps        int64          `json:"InstancePps"`
	StorageBlockAmount int64          `json:"StorageBlockAmount"`
	CPUType            string         `json:"CpuType"`
	GPU                int64          `json:"Gpu"`
	FPGA               int64          `json:"Fpga"`
	Remark             string         `json:"Remark"`
	GPUCount           float64        `json:"GpuCount"`
	Frequency          string         `json:"Frequency"`
	StatusCategory     string         `json:"StatusCategory"`
}

type describeZoneInstanceConfigInfosResponse struct {
	InstanceTypeQuotaSet []instanceTypeQuotaJSON `json:"InstanceTypeQuotaSet"`
	RequestID            string                  `json:"RequestId"`
}

// Filter limits of DescribeZoneInstanceConfigInfos.
const maxZoneConfigFilterValues = 100

// describeZoneInstanceConfigInfos answers the catalogue: one item per
// zone, instance type and charge type (POSTPAID_BY_HOUR, and SPOTPAID
// for types sold as spot). The zones are Config.Zones of the region; with
// none configured, the zones a "zone" filter names (any "<region>-<n>").
// A zone and type with a stock-out rule refusing launches is SOLD_OUT.
func (e *Emulator) describeZoneInstanceConfigInfos(c *call) (any, *apiError) {
	var p cvm.DescribeZoneInstanceConfigInfosRequestParams
	if aerr := decodeParams(c.body, &p); aerr != nil {
		return nil, aerr
	}
	if len(p.Filters) > maxFilters {
		return nil, errf(CodeParamValueLimitExceeded, "At most %d Filters are allowed.", maxFilters)
	}
	want := map[string][]string{}
	for _, f := range p.Filters {
		if f == nil || deref(f.Name) == "" {
			return nil, errf(CodeInvalidFilter, "A filter needs a Name.")
		}
		name := *f.Name
		switch name {
		case "zone", "instance-family", "instance-type", "instance-charge-type", "sort-keys":
		default:
			return nil, errf(CodeInvalidFilter, "The filter `%s` is not supported.", name)
		}
		if len(f.Values) > maxZoneConfigFilterValues {
			return nil, errf(CodeFilterValueLimitExceeded, "At most %d values per filter are allowed.", maxZoneConfigFilterValues)
		}
		for _, v := range f.Values {
			want[name] = append(want[name], deref(v))
		}
	}
	var zones []string
	for _, z := range e.cfg.Zones {
		if strings.HasPrefix(z, c.region+"-") {
			zones = append(zones, z)
		}
	}
	if wz, ok := want["zone"]; ok {
		if len(e.cfg.Zones) == 0 {
			zones = nil
			for _, z := range wz {
				if aerr := e.checkZone(c.region, z); aerr != nil {
					return nil, aerr
				}
				if !slices.Contains(zones, z) {
					zones = append(zones, z)
				}
			}
		} else {
			zones = slices.DeleteFunc(zones, func(z string) bool { return !slices.Contains(wz, z) })
		}
	}
	types := slices.DeleteFunc(slices.Clone(e.instanceTypes), func(t InstanceType) bool { return IsECSType(t.InstanceType) })
	for _, name := range want["instance-type"] {
		if !slices.ContainsFunc(types, func(t InstanceType) bool { return t.InstanceType == name }) {
			if it, ok := e.instanceTypeInfo(name); ok && !IsECSType(name) {
				types = append(types, it)
			}
		}
	}
	match := func(filter, value string) bool {
		vals, ok := want[filter]
		return !ok || slices.Contains(vals, value)
	}
	resp := describeZoneInstanceConfigInfosResponse{InstanceTypeQuotaSet: []instanceTypeQuotaJSON{}, RequestID: c.reqID}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, z := range zones {
		for _, t := range types {
			if !match("instance-type", t.InstanceType) || !match("instance-family", t.InstanceFamily) {
				continue
			}
			for _, charge := range []string{ChargeTypeOnDemand, ChargeTypeSpot} {
				if (charge == ChargeTypeSpot && t.NoSpot) || !match("instance-charge-type", charge) {
					continue
				}
				item := instanceTypeQuotaJSON{
					Zone: z, InstanceType: t.InstanceType, InstanceChargeType: charge, NetworkCard: 25,
					Externals: map[string]any{}, CPU: t.CPU, Memory: t.Memory, InstanceFamily: t.InstanceFamily,
					TypeName: t.TypeName, LocalDiskTypeList: []any{}, Status: "SELL",
					Price:             map[string]any{"UnitPrice": 0.1, "ChargeUnit": "HOUR"},
					InstanceBandwidth: 1.5, InstancePps: 30, CPUType: t.CPUType, GPU: t.GPU, GPUCount: t.GPUCount,
					Frequency: "2.5/3.1GHz", StatusCategory: "EnoughStock",
				}
				if charge == ChargeTypeSpot && t.SpotPrice > 0 {
					item.Price = map[string]any{"UnitPrice": t.SpotPrice, "ChargeUnit": "HOUR"}
				}
				if _, out := e.stockOutLocked(z, t.InstanceType, charge, false); out {
					item.Status, item.StatusCategory, item.SoldOutReason = "SOLD_OUT", "WithoutStock", "Sold out"
				}
				resp.InstanceTypeQuotaSet = append(resp.InstanceTypeQuotaSet, item)
			}
		}
	}
	return resp, nil
}
