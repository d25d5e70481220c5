package alibaba

import (
	"context"
	"fmt"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

var _ ports.InstanceShapes = (*Cloud)(nil)

// InstanceShapes implements ports.InstanceShapes: not yet for ECS (it
// needs DescribeAvailableResource and DescribeInstanceTypes, which
// neither this adapter nor the emulator's ECS front end speak). It checks
// the query, then answers ports.ErrNotSupported, so a caller validating a
// template's instance types can say that it cannot for this cloud.
func (c *Cloud) InstanceShapes(_ context.Context, _ ports.Target, zones, types []string) ([]domain.InstanceShape, error) {
	if err := ports.CheckShapeQuery(zones, types); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("alibaba cloud instance shapes: %w", ports.ErrNotSupported)
}
