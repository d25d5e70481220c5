package domain

import "github.com/nodesmith/nodesmith/libs/contract"

// LaunchError is why the cloud says a VM failed to launch (a
// LAUNCH_FAILED VM's latest operation error), classified in the shared
// vocabulary: Kind is contract.ErrorKindCapacity when the zone or
// instance type ran out of stock, so the VM is reported as CA's
// OutOfResources and another zone or type can be tried.
type LaunchError struct {
	Kind contract.ErrorKind
	// Code is the cloud's error code the message names, if any.
	Code string
	// Message is the cloud's reason, with the VM's zone and instance type.
	Message string
}

// Architectures of an instance shape, as Kubernetes names them.
const (
	ArchAMD64 = "amd64"
	ArchARM64 = "arm64"
)

// InstanceShape is what one instance type is in one zone: the resources a
// node of it offers, which must be the same for every type of a node
// group (Cluster Autoscaler's groups are homogeneous).
type InstanceShape struct {
	Zone, InstanceType string
	// Family is the cloud's instance family ("S5").
	Family string
	VCPU   int
	// MemoryMiB is the memory in MiB.
	MemoryMiB int64
	// GPU is the number of GPUs; GPUModel names them ("" without).
	GPU      int
	GPUModel string
	// Arch is ArchAMD64 or ArchARM64.
	Arch string
	// SoldOut is set when the cloud's catalogue says the zone has none of
	// the type to sell right now.
	SoldOut bool
}

// SameShape reports whether nodes of s and o are interchangeable for the
// Cluster Autoscaler: the same vCPUs, memory, GPUs and architecture.
func (s InstanceShape) SameShape(o InstanceShape) bool {
	return s.VCPU == o.VCPU && s.MemoryMiB == o.MemoryMiB && s.GPU == o.GPU && s.GPUModel == o.GPUModel && s.Arch == o.Arch
}
