package service

import (
	"context"
	"log/slog"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudshapes"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/yamlconfig"
)

// shapesTimeout bounds asking the cloud adapters about one template's
// offerings.
const shapesTimeout = 3 * time.Second

// checkOfferingShapes checks the file's template offerings against the
// cloud's instance shapes: a mixed or unoffered list makes the file
// invalid; a template the cloud adapters could not answer for (not up
// yet at start, a cloud that cannot tell) is logged and accepted.
func checkOfferingShapes(ctx context.Context, c *yamlconfig.Config, ask cloudshapes.Ask, log *slog.Logger) error {
	unchecked, err := c.CheckShapes(ctx, ask, shapesTimeout)
	for _, w := range unchecked {
		log.Warn(w)
	}
	return err
}
