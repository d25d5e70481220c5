package domain

import (
	"sort"

	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/libs/providerid"
)

// Group rules: what the size operations of Cluster Autoscaler and operators
// may do to a group. The app applies them to its cached records.

// CheckIncrease refuses a size increase that is not positive or that takes
// the target beyond the max size.
func (g NodeGroup) CheckIncrease(delta int) error {
	if delta <= 0 {
		return Errorf(contract.CodeInvalidArgument, "delta must be positive, got %d", delta)
	}
	if g.TargetSize+delta > g.MaxSize {
		return Errorf(contract.CodeOutOfRange, "size increase too large: target %d + %d exceeds max size %d of %q",
			g.TargetSize, delta, g.MaxSize, g.ID)
	}
	return nil
}

// CheckTarget refuses a target outside [min, max].
func (g NodeGroup) CheckTarget(target int) error {
	if target < g.MinSize || target > g.MaxSize {
		return Errorf(contract.CodeOutOfRange, "target %d outside [%d, %d] of %q", target, g.MinSize, g.MaxSize, g.ID)
	}
	return nil
}

// CheckDecrease refuses a lower target below the min size, or below the
// number of live instances with a registered Node (a decrease only
// cancels capacity that has not become a node; cancellable is how many
// could be cancelled, for the message).
func (g NodeGroup) CheckDecrease(target, registered, cancellable int) error {
	if target < g.MinSize {
		return Errorf(contract.CodeOutOfRange, "target %d would be below min size %d of %q", target, g.MinSize, g.ID)
	}
	if target < registered {
		return Errorf(contract.CodeFailedPrecondition,
			"cannot decrease %q to %d: %d instances have registered nodes (delete nodes instead); %d unregistered can be cancelled",
			g.ID, target, registered, cancellable)
	}
	return nil
}

// DeleteDecrease is how much deleting the live instances release lowers
// the target. The target never goes below the min size: an instance whose
// creation failed is then replaced instead (deleted without lowering the
// target); any other instance that does not fit refuses the deletion.
func (g NodeGroup) DeleteDecrease(release []Instance) (int, error) {
	var failed, normal int
	for _, in := range release {
		if in.CreationFailed {
			failed++
		} else {
			normal++
		}
	}
	room := g.TargetSize - g.MinSize
	if normal > room {
		return 0, Errorf(contract.CodeOutOfRange,
			"deleting %d nodes would take %q below its min size %d (target %d)", len(release), g.ID, g.MinSize, g.TargetSize)
	}
	return normal + min(failed, room-normal), nil
}

// CancelOrder reports whether x is cheaper capacity to give up than y:
// Pending records first, then instances whose creation failed, then the
// least advanced; the newest first among equals.
func CancelOrder(x, y Instance) bool {
	rank := func(in Instance) int {
		switch {
		case in.State == StatePending:
			return 0
		case in.CreationFailed:
			return 1
		}
		return int(in.State) + 1
	}
	if rank(x) != rank(y) {
		return rank(x) < rank(y)
	}
	return x.CreatedAt.After(y.CreatedAt) // newest first
}

// SortForCancel orders ins by CancelOrder (stable).
func SortForCancel(ins []Instance) {
	sort.SliceStable(ins, func(i, j int) bool { return CancelOrder(ins[i], ins[j]) })
}

// NodeRef is a node as Cluster Autoscaler names it in DeleteNodes.
type NodeRef struct {
	ProviderID string
	Name       string
}

func (n NodeRef) String() string {
	if n.ProviderID != "" {
		return n.ProviderID
	}
	return n.Name
}

// InstanceFinder looks instances up, for ResolveNode.
type InstanceFinder interface {
	// ByProviderID finds the instance with this providerID (real or
	// placeholder).
	ByProviderID(providerID string) (Instance, bool)
	// ByID finds the instance with this id.
	ByID(id string) (Instance, bool)
	// ByNodeName finds the instance whose Node has this name.
	ByNodeName(name string) (Instance, bool)
}

// ResolveNode finds the instance CA means by a node, trying in order: its
// exact providerID (real or placeholder), a placeholder's instance id, its
// name or providerID as an instance id, and its name as a Node name.
func ResolveNode(n NodeRef, f InstanceFinder) (Instance, bool) {
	if n.ProviderID != "" {
		if in, ok := f.ByProviderID(n.ProviderID); ok {
			return in, true
		}
	}
	if _, id, ok := providerid.ParsePlaceholder(n.ProviderID); ok {
		if in, ok := f.ByID(id); ok {
			return in, true
		}
	}
	for _, name := range []string{n.Name, n.ProviderID} {
		if name == "" {
			continue
		}
		if in, ok := f.ByID(name); ok {
			return in, true
		}
	}
	if n.Name != "" {
		return f.ByNodeName(n.Name)
	}
	return Instance{}, false
}
