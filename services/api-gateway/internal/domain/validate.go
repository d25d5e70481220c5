package domain

// ValidateGroupID rejects an empty group id: CA never sends one for a
// mutation, so it is a client bug, not an unknown group.
func ValidateGroupID(id string) error {
	if id == "" {
		return Errorf(CodeInvalidArgument, "node group id is required")
	}
	return nil
}

// ValidateIncrease checks an IncreaseSize delta: strictly positive.
func ValidateIncrease(delta int32) error {
	if delta <= 0 {
		return Errorf(CodeInvalidArgument, "size increase must be positive, got %d", delta)
	}
	return nil
}

// ValidateDecrease checks a DecreaseTargetSize delta: strictly negative.
func ValidateDecrease(delta int32) error {
	if delta >= 0 {
		return Errorf(CodeInvalidArgument, "size decrease must be negative, got %d", delta)
	}
	return nil
}

// ValidateTargetSize checks an operator's explicit target against the
// group's bounds.
func ValidateTargetSize(target, minSize, maxSize int32) error {
	if target < minSize || target > maxSize {
		return Errorf(CodeInvalidArgument, "target size %d is outside the group's bounds [%d, %d]", target, minSize, maxSize)
	}
	return nil
}
