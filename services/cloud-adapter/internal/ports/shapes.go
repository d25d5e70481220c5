package ports

import (
	"context"
	"errors"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
)

// ErrNotSupported is returned (wrapped) by an optional capability a cloud
// adapter does not offer; callers check it with errors.Is and fall back.
var ErrNotSupported = errors.New("not supported by this cloud")

// MaxShapeQuery bounds the zones and the instance types of one
// InstanceShapes call (the clouds' filter limits).
const MaxShapeQuery = 100

// InstanceShapes is an optional capability of a Cloud: what its instance
// types are, per zone. The adapters implement it next to Cloud; a caller
// gets it with a type assertion on the Cloud.
type InstanceShapes interface {
	// InstanceShapes returns the shape of every type of types (at most
	// MaxShapeQuery) the cloud offers in each zone of zones (at most
	// MaxShapeQuery), one entry per (zone, type) it offers; a type a zone
	// does not offer is missing from the answer. Errors: invalid
	// parameters (no zone or type, too many), ErrNotSupported (wrapped)
	// when the cloud's adapter cannot tell, and otherwise as for
	// Cloud.Describe.
	InstanceShapes(ctx context.Context, t Target, zones, types []string) ([]domain.InstanceShape, error)
}

// CheckShapeQuery validates the zones and types of an InstanceShapes call.
func CheckShapeQuery(zones, types []string) error {
	switch {
	case len(zones) == 0 || len(types) == 0:
		return NewInvalidParametersError("InvalidShapeQuery", "at least one zone and one instance type are required")
	case len(zones) > MaxShapeQuery || len(types) > MaxShapeQuery:
		return NewInvalidParametersError("InvalidShapeQuery", "at most 100 zones and 100 instance types per query")
	}
	for _, s := range append(append([]string(nil), zones...), types...) {
		if s == "" {
			return NewInvalidParametersError("InvalidShapeQuery", "a zone or instance type is empty")
		}
	}
	return nil
}
