package cloudspec

import "fmt"

// Shape is what one instance type is in one zone, as the cloud's
// catalogue says (Tencent's DescribeZoneInstanceConfigInfos): the
// resources a node of it offers. Cluster Autoscaler's node groups are
// homogeneous, so every type of one template must have the same shape.
type Shape struct {
	Zone, InstanceType string
	VCPU               int
	MemoryMiB          int64
	// GPU is the number of GPUs, GPUType their model or family ("" without).
	GPU     int
	GPUType string
	// Arch is "amd64" or "arm64".
	Arch string
}

// SameShape reports whether nodes of s and o are interchangeable for the
// Cluster Autoscaler: the same vCPUs, memory, GPUs and architecture.
func (s Shape) SameShape(o Shape) bool {
	return s.VCPU == o.VCPU && s.MemoryMiB == o.MemoryMiB && s.GPU == o.GPU && s.GPUType == o.GPUType && s.Arch == o.Arch
}

// Resources describes the shape for people: "4 vCPU, 8 GiB, arm64", with
// ", 1 GPU (GN7)" when it has GPUs.
func (s Shape) Resources() string {
	mem := fmt.Sprintf("%d MiB", s.MemoryMiB)
	if s.MemoryMiB%1024 == 0 {
		mem = fmt.Sprintf("%d GiB", s.MemoryMiB/1024)
	}
	out := fmt.Sprintf("%d vCPU, %s, %s", s.VCPU, mem, s.Arch)
	if s.GPU > 0 || s.GPUType != "" {
		out += fmt.Sprintf(", %d GPU", s.GPU)
		if s.GPUType != "" {
			out += " (" + s.GPUType + ")"
		}
	}
	return out
}

// ShapeQuery returns the distinct zones and instance types of offerings,
// in the order they first appear: what to ask the cloud about them.
func ShapeQuery(offerings []Offering) (zones, types []string) {
	seenZ, seenT := map[string]bool{}, map[string]bool{}
	for _, o := range offerings {
		if o.Zone != "" && !seenZ[o.Zone] {
			seenZ[o.Zone] = true
			zones = append(zones, o.Zone)
		}
		if o.InstanceType != "" && !seenT[o.InstanceType] {
			seenT[o.InstanceType] = true
			types = append(types, o.InstanceType)
		}
	}
	return zones, types
}

// CheckShapes checks a template's offerings against the cloud's shapes of
// their zones and types (one entry per (zone, type) the cloud offers): an
// offering whose type the cloud does not offer in its zone, or whose
// shape differs from the first offered offering's, is an error at
// "offerings[i].instanceType". Offerings missing a zone or a type are left
// to Reconcile.
func CheckShapes(offerings []Offering, shapes []Shape) []FieldError {
	byKey := make(map[[2]string]Shape, len(shapes))
	for _, s := range shapes {
		byKey[[2]string{s.Zone, s.InstanceType}] = s
	}
	var errs []FieldError
	ref, refIdx := Shape{}, -1
	for i, o := range offerings {
		if o.Zone == "" || o.InstanceType == "" {
			continue
		}
		path := fmt.Sprintf("offerings[%d].instanceType", i)
		s, ok := byKey[[2]string{o.Zone, o.InstanceType}]
		switch {
		case !ok:
			errs = append(errs, FieldError{path, fmt.Sprintf("%s is not offered in %s", o.InstanceType, o.Zone)})
		case refIdx < 0:
			ref, refIdx = s, i
		case !s.SameShape(ref):
			errs = append(errs, FieldError{path, fmt.Sprintf("%s (%s) differs from offerings[%d] %s (%s): the types of one template must have one shape",
				o.InstanceType, s.Resources(), refIdx, ref.InstanceType, ref.Resources())})
		}
	}
	return errs
}
