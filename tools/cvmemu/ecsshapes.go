package cvmemu

import (
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
)

// ECS instance shapes: DescribeInstanceTypes (what a type is) and
// DescribeAvailableResource with DestinationResource=InstanceType (what a
// zone sells, and whether it has stock), from the instance type table the
// CVM front end's DescribeZoneInstanceConfigInfos lists too (its "ecs.*"
// rows, see DefaultInstanceTypes) and the same stock-out rules.

// ECS shape actions.
const (
	ActionDescribeInstanceTypes     = "DescribeInstanceTypes"
	ActionDescribeAvailableResource = "DescribeAvailableResource"
)

// Limits of the real DescribeInstanceTypes and DescribeAvailableResource.
const (
	ecsMaxInstanceTypesFilter = 10   // InstanceTypes.N
	ecsMaxInstanceTypesPage   = 1600 // MaxResults, also the default
)

// ECS CpuArchitecture values.
const (
	ECSArchX86 = "X86"
	ECSArchARM = "ARM"
)

// DescribeAvailableResource's Status and StatusCategory values.
const (
	ECSResourceAvailable    = "Available"
	ECSResourceSoldOut      = "SoldOut"
	ECSStockWithStock       = "WithStock"
	ECSStockClosedWithStock = "ClosedWithStock"
	ECSStockWithoutStock    = "WithoutStock"
)

// Wire types; field names are those of the SDK's models.

type ecsInstanceTypeJSON struct {
	InstanceTypeID     string  `json:"InstanceTypeId"`
	InstanceTypeFamily string  `json:"InstanceTypeFamily"`
	CPUCoreCount       int64   `json:"CpuCoreCount"`
	MemorySize         float64 `json:"MemorySize"`
	GPUAmount          int64   `json:"GPUAmount"`
	GPUSpec            string  `json:"GPUSpec"`
	CPUArchitecture    string  `json:"CpuArchitecture"`
	PhysicalProcessor  string  `json:"PhysicalProcessorModel"`
	InstanceCategory   string  `json:"InstanceCategory"`
	EniQuantity        int     `json:"EniQuantity"`
}

type ecsDescribeInstanceTypesResponse struct {
	RequestID     string `json:"RequestId"`
	NextToken     string `json:"NextToken"`
	InstanceTypes struct {
		InstanceType []ecsInstanceTypeJSON `json:"InstanceType"`
	} `json:"InstanceTypes"`
}

type ecsSupportedResourceJSON struct {
	Value          string `json:"Value"`
	Status         string `json:"Status"`
	StatusCategory string `json:"StatusCategory"`
}

type ecsAvailableResourceJSON struct {
	Type               string `json:"Type"`
	SupportedResources struct {
		SupportedResource []ecsSupportedResourceJSON `json:"SupportedResource"`
	} `json:"SupportedResources"`
}

type ecsAvailableZoneJSON struct {
	RegionID           string `json:"RegionId"`
	ZoneID             string `json:"ZoneId"`
	Status             string `json:"Status"`
	StatusCategory     string `json:"StatusCategory"`
	AvailableResources struct {
		AvailableResource []ecsAvailableResourceJSON `json:"AvailableResource"`
	} `json:"AvailableResources"`
}

type ecsDescribeAvailableResourceResponse struct {
	RequestID      string `json:"RequestId"`
	AvailableZones struct {
		AvailableZone []ecsAvailableZoneJSON `json:"AvailableZone"`
	} `json:"AvailableZones"`
}

// ecsInstanceTypeInfo looks an ECS type up in the table; a type not in it
// whose name gives its shape (ECSInstanceShape) is a plain Intel type.
func (e *Emulator) ecsInstanceTypeInfo(name string) (InstanceType, bool) {
	if !IsECSType(name) {
		return InstanceType{}, false
	}
	if i := slices.IndexFunc(e.instanceTypes, func(t InstanceType) bool { return t.InstanceType == name }); i >= 0 {
		return e.instanceTypes[i], true
	}
	cpu, mem := ECSInstanceShape(name)
	if cpu == 0 || mem%1024 != 0 {
		return InstanceType{}, false
	}
	return InstanceType{InstanceType: name, InstanceFamily: ecsFamily(name), TypeName: ecsFamily(name),
		CPU: int64(cpu), Memory: int64(mem / 1024), CPUType: "Intel Xeon", SpotPrice: 0.01}, true
}

// ecsTypes is the table's ECS types, then those of names (the named ones
// the table lacks whose name gives their shape).
func (e *Emulator) ecsTypes(names []string) []InstanceType {
	out := slices.DeleteFunc(slices.Clone(e.instanceTypes), func(t InstanceType) bool { return !IsECSType(t.InstanceType) })
	for _, n := range names {
		if slices.ContainsFunc(out, func(t InstanceType) bool { return t.InstanceType == n }) {
			continue
		}
		if it, ok := e.ecsInstanceTypeInfo(n); ok {
			out = append(out, it)
		}
	}
	return out
}

func ecsArch(t InstanceType) string {
	if t.IsARM() {
		return ECSArchARM
	}
	return ECSArchX86
}

// ecsDescribeInstanceTypes answers the shapes of the ECS types, filtered
// by InstanceTypes.N (1 to 10; unknown names are left out, not refused),
// InstanceTypeFamily and CpuArchitecture, paged by MaxResults (1 to 1600,
// default 1600) and NextToken.
func (e *Emulator) ecsDescribeInstanceTypes(c *call) (any, *apiError) {
	p := c.params
	names, aerr := listParam(p, "InstanceTypes", ecsMaxInstanceTypesFilter)
	if aerr != nil {
		return nil, aerr
	}
	for i, n := range names {
		if n == "" {
			return nil, errf(ecsCodeInvalidParameter, "The specified parameter \"InstanceTypes.%d\" is empty.", i+1)
		}
	}
	arch := p["CpuArchitecture"]
	switch arch {
	case "", ECSArchX86, ECSArchARM:
	default:
		return nil, errf(ecsCodeInvalidParameter, "The specified parameter \"CpuArchitecture\" is not valid: %q (X86 or ARM).", arch)
	}
	family := p["InstanceTypeFamily"]
	limit, aerr := intParam(p, "MaxResults", ecsMaxInstanceTypesPage, 1, ecsMaxInstanceTypesPage)
	if aerr != nil {
		return nil, aerr
	}
	offset := 0
	if tok := p["NextToken"]; tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		rest, ok := strings.CutPrefix(string(b), "types:")
		n, perr := strconv.Atoi(rest)
		if err != nil || !ok || perr != nil || n < 0 {
			return nil, errf(ecsCodeNextTokenMalformed, "The specified NextToken %q is not valid.", tok)
		}
		offset = n
	}
	var all []InstanceType
	for _, t := range e.ecsTypes(names) {
		if (len(names) == 0 || slices.Contains(names, t.InstanceType)) &&
			(family == "" || t.InstanceFamily == family) && (arch == "" || ecsArch(t) == arch) {
			all = append(all, t)
		}
	}
	resp := ecsDescribeInstanceTypesResponse{RequestID: c.reqID}
	resp.InstanceTypes.InstanceType = []ecsInstanceTypeJSON{}
	for _, t := range page(all, offset, limit) {
		resp.InstanceTypes.InstanceType = append(resp.InstanceTypes.InstanceType, ecsInstanceTypeJSON{
			InstanceTypeID: t.InstanceType, InstanceTypeFamily: t.InstanceFamily,
			CPUCoreCount: t.CPU, MemorySize: float64(t.Memory), GPUAmount: t.GPU, GPUSpec: t.GPUSpec,
			CPUArchitecture: ecsArch(t), PhysicalProcessor: t.CPUType, InstanceCategory: t.TypeName, EniQuantity: 3,
		})
	}
	if offset+limit < len(all) {
		resp.NextToken = base64.RawURLEncoding.EncodeToString([]byte("types:" + strconv.Itoa(offset+limit)))
	}
	return resp, nil
}

// ecsDescribeAvailableResource answers, for DestinationResource
// InstanceType, the ECS types each zone of the region sells, the table's
// (ZoneId: one zone; InstanceType: one type, which may be one only its name
// describes) for the charge type and spot strategy
// asked (PostPaid and NoSpot by default; a type that cannot be spot is not
// sold as spot). The zones are Config.Zones of the region; with none
// configured, only the ZoneId asked. A stock-out rule refusing launches
// makes the type SoldOut/WithoutStock in its zones, or, with code
// InvalidResourceType.NotSupported, leaves it out (the zone does not offer
// it); a rule striking at launch leaves it Available, as the catalogue
// still shows stock then. A zone with nothing left to sell is SoldOut.
func (e *Emulator) ecsDescribeAvailableResource(c *call) (any, *apiError) {
	p := c.params
	switch dr := p["DestinationResource"]; dr {
	case "InstanceType":
	case "":
		return nil, missing("DestinationResource")
	case "Zone", "IoOptimized", "SystemDisk", "DataDisk", "Network", "ddh":
		return nil, errf(ecsCodeInvalidParameter, "The specified parameter \"DestinationResource\" %q is valid but not served by the emulator (InstanceType).", dr)
	default:
		return nil, errf(ecsCodeInvalidParameter, "The specified parameter \"DestinationResource\" is not valid: %q (Zone, IoOptimized, InstanceType, SystemDisk, DataDisk, Network or ddh).", dr)
	}
	switch rt := p["ResourceType"]; rt {
	case "", "instance":
	case "disk", "reservedinstance", "ddh":
		return nil, errf(ecsCodeInvalidParameter, "The specified parameter \"ResourceType\" %q is valid but not served by the emulator (instance).", rt)
	default:
		return nil, errf(ecsCodeInvalidParameter, "The specified parameter \"ResourceType\" is not valid: %q (instance, disk, reservedinstance or ddh).", rt)
	}
	chargeType, spot, aerr := ecsChargeAndSpot(p)
	if aerr != nil {
		return nil, aerr
	}
	if spot != "NoSpot" && chargeType != "PostPaid" {
		return nil, errf(ecsCodeChargeTypeNotSupported, "A spot instance (SpotStrategy %s) must be PostPaid, not %s.", spot, chargeType)
	}
	zone, only := p["ZoneId"], p["InstanceType"]
	var zones []string
	if zone != "" {
		if aerr := e.checkZone(c.region, zone); aerr != nil {
			return nil, errf(ecsCodeZoneNotFound, "The specified zone %q does not exist in region %q.", zone, c.region)
		}
		zones = []string{zone}
	} else {
		for _, z := range e.cfg.Zones {
			if strings.HasPrefix(z, c.region+"-") {
				zones = append(zones, z)
			}
		}
	}
	var named []string
	if only != "" {
		named = []string{only}
	}
	types := e.ecsTypes(named)
	resp := ecsDescribeAvailableResourceResponse{RequestID: c.reqID}
	resp.AvailableZones.AvailableZone = []ecsAvailableZoneJSON{}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, z := range zones {
		var sold []ecsSupportedResourceJSON
		inStock := false
		for _, t := range types {
			if (only != "" && t.InstanceType != only) || (spot != "NoSpot" && t.NoSpot) {
				continue
			}
			r := ecsSupportedResourceJSON{Value: t.InstanceType, Status: ECSResourceAvailable, StatusCategory: ECSStockWithStock}
			if so, out := e.stockOutLocked(z, t.InstanceType, chargeType, false); out {
				if so.code(ecsDialect) == ECSCodeResourceNotSupported {
					continue // not offered in the zone at all
				}
				r.Status, r.StatusCategory = ECSResourceSoldOut, ECSStockWithoutStock
			} else {
				inStock = true
			}
			sold = append(sold, r)
		}
		if len(sold) == 0 {
			continue // the real API lists only zones offering something
		}
		az := ecsAvailableZoneJSON{RegionID: c.region, ZoneID: z, Status: ECSResourceAvailable, StatusCategory: ECSStockWithStock}
		if !inStock {
			az.Status, az.StatusCategory = ECSResourceSoldOut, ECSStockWithoutStock
		}
		res := ecsAvailableResourceJSON{Type: "InstanceType"}
		res.SupportedResources.SupportedResource = sold
		az.AvailableResources.AvailableResource = []ecsAvailableResourceJSON{res}
		resp.AvailableZones.AvailableZone = append(resp.AvailableZones.AvailableZone, az)
	}
	return resp, nil
}
