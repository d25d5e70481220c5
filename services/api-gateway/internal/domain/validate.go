package domain

import "github.com/nodesmith/nodesmith/libs/contract"

// ValidateGroupID rejects an empty group id: CA never sends one for a
// mutation, so it is a client bug, not an unknown group.
func ValidateGroupID(id string) error {
	if id == "" {
		return Errorf(contract.CodeInvalidArgument, "node group id is required")
	}
	return nil
}

// ValidateIncrease checks an IncreaseSize delta: strictly positive.
func ValidateIncrease(delta int32) error {
	if delta <= 0 {
		return Errorf(contract.CodeInvalidArgument, "size increase must be positive, got %d", delta)
	}
	return nil
}

// ValidateDecrease checks a DecreaseTargetSize delta: strictly negative.
func ValidateDecrease(delta int32) error {
	if delta >= 0 {
		return Errorf(contract.CodeInvalidArgument, "size decrease must be negative, got %d", delta)
	}
	return nil
}

// ValidateTargetSize checks an operator's explicit target against the
// group's bounds.
func ValidateTargetSize(target, minSize, maxSize int32) error {
	if target < minSize || target > maxSize {
		return Errorf(contract.CodeInvalidArgument, "target size %d is outside the group's bounds [%d, %d]", target, minSize, maxSize)
	}
	return nil
}

// ValidateBounds checks a group's size bounds and target.
func ValidateBounds(minSize, maxSize, target int32) error {
	switch {
	case minSize < 0:
		return Errorf(contract.CodeInvalidArgument, "minSize must not be negative, got %d", minSize)
	case maxSize < minSize:
		return Errorf(contract.CodeInvalidArgument, "maxSize %d is below minSize %d", maxSize, minSize)
	}
	return ValidateTargetSize(target, minSize, maxSize)
}

// ValidateNewGroupID checks the id of a group being defined with the
// shared rule (libs/contract): it becomes a KV key, the first token of its
// instances' keys ("<group>.<id>") and part of their node names.
func ValidateNewGroupID(id string) error {
	if p := contract.ValidGroupID(id); p != "" {
		return Errorf(contract.CodeInvalidArgument, "node group id: %s", p)
	}
	return nil
}
