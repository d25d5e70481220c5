package domain

import "testing"

func TestSameShape(t *testing.T) {
	base := InstanceShape{Zone: "z1", InstanceType: "S5.MEDIUM4", Family: "S5", VCPU: 2, MemoryMiB: 4096, Arch: ArchAMD64}
	same := base
	same.Zone, same.InstanceType, same.Family, same.SoldOut = "z2", "SA2.MEDIUM4", "SA2", true
	if !base.SameShape(same) {
		t.Fatal("zone, type, family and stock are not the shape")
	}
	for name, change := range map[string]func(*InstanceShape){
		"vcpu":      func(s *InstanceShape) { s.VCPU = 4 },
		"memory":    func(s *InstanceShape) { s.MemoryMiB = 8192 },
		"gpu":       func(s *InstanceShape) { s.GPU = 1 },
		"gpu model": func(s *InstanceShape) { s.GPUModel = "T4" },
		"arch":      func(s *InstanceShape) { s.Arch = ArchARM64 },
	} {
		o := base
		change(&o)
		if base.SameShape(o) || o.SameShape(base) {
			t.Errorf("a different %s is the same shape", name)
		}
	}
}
