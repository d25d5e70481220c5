package service

import (
	"context"
	"log/slog"

	"github.com/nodesmith/nodesmith/libs/cloudshapes"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/yamlconfig"
)

// checkOfferingShapes checks the file's template offerings against the
// cloud's instance shapes: a mixed or unoffered list makes the file
// invalid; a template the cloud adapters could not answer for (not up
// yet at start, a cloud that cannot tell) is logged and accepted.
func checkOfferingShapes(ctx context.Context, c *yamlconfig.Config, ask cloudshapes.Ask, log *slog.Logger) error {
	unchecked, err := c.CheckShapes(ctx, ask, cloudshapes.Timeout)
	for _, w := range unchecked {
		log.Warn(w)
	}
	return err
}
