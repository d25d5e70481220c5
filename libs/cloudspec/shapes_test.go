package cloudspec

import (
	"reflect"
	"testing"
)

func TestCheckShapes(t *testing.T) {
	s2 := func(zone, typ string) Shape {
		return Shape{Zone: zone, InstanceType: typ, VCPU: 2, MemoryMiB: 4096, Arch: "amd64"}
	}
	arm := Shape{Zone: "z1", InstanceType: "SR1.LARGE8", VCPU: 4, MemoryMiB: 8192, Arch: "arm64"}
	gpu := Shape{Zone: "z1", InstanceType: "GN7.LARGE20", VCPU: 2, MemoryMiB: 4096, GPU: 1, GPUType: "GN7", Arch: "amd64"}
	odd := Shape{Zone: "z1", InstanceType: "S5.ODD", VCPU: 2, MemoryMiB: 4608, Arch: "amd64"}
	shapes := []Shape{s2("z1", "S5.MEDIUM4"), s2("z2", "S5.MEDIUM4"), s2("z1", "SA2.MEDIUM4"), arm, gpu, odd}
	off := func(zone, typ string) Offering { return Offering{Zone: zone, InstanceType: typ} }
	for _, tc := range []struct {
		name      string
		offerings []Offering
		want      []FieldError
	}{
		{"no offerings", nil, nil},
		{"one shape across zones and types", []Offering{off("z1", "S5.MEDIUM4"), off("z2", "S5.MEDIUM4"), off("z1", "SA2.MEDIUM4")}, nil},
		{"not offered", []Offering{off("z1", "S5.MEDIUM4"), off("z2", "SA2.MEDIUM4")},
			[]FieldError{{"offerings[1].instanceType", "SA2.MEDIUM4 is not offered in z2"}}},
		{"mixed architecture", []Offering{off("z1", "S5.MEDIUM4"), off("z1", "SR1.LARGE8")},
			[]FieldError{{"offerings[1].instanceType", "SR1.LARGE8 (4 vCPU, 8 GiB, arm64) differs from offerings[0] S5.MEDIUM4 (2 vCPU, 4 GiB, amd64): the types of one template must have one shape"}}},
		{"GPU differs", []Offering{off("z1", "S5.MEDIUM4"), off("z1", "GN7.LARGE20")},
			[]FieldError{{"offerings[1].instanceType", "GN7.LARGE20 (2 vCPU, 4 GiB, amd64, 1 GPU (GN7)) differs from offerings[0] S5.MEDIUM4 (2 vCPU, 4 GiB, amd64): the types of one template must have one shape"}}},
		{"memory in MiB", []Offering{off("z1", "S5.MEDIUM4"), off("z1", "S5.ODD")},
			[]FieldError{{"offerings[1].instanceType", "S5.ODD (2 vCPU, 4608 MiB, amd64) differs from offerings[0] S5.MEDIUM4 (2 vCPU, 4 GiB, amd64): the types of one template must have one shape"}}},
		{"first not offered: the next one is the reference", []Offering{off("z3", "S5.MEDIUM4"), off("z1", "SR1.LARGE8"), off("z1", "S5.MEDIUM4")},
			[]FieldError{
				{"offerings[0].instanceType", "S5.MEDIUM4 is not offered in z3"},
				{"offerings[2].instanceType", "S5.MEDIUM4 (2 vCPU, 4 GiB, amd64) differs from offerings[1] SR1.LARGE8 (4 vCPU, 8 GiB, arm64): the types of one template must have one shape"},
			}},
		{"incomplete offerings are Reconcile's", []Offering{off("", "S5.MEDIUM4"), off("z1", "")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CheckShapes(tc.offerings, shapes); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("CheckShapes:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestShapeQuery(t *testing.T) {
	zones, types := ShapeQuery([]Offering{{Zone: "z2", InstanceType: "B"}, {Zone: "z1", InstanceType: "B"}, {Zone: "z2", InstanceType: "A"}, {}})
	if !reflect.DeepEqual(zones, []string{"z2", "z1"}) || !reflect.DeepEqual(types, []string{"B", "A"}) {
		t.Errorf("ShapeQuery = %v, %v", zones, types)
	}
}
