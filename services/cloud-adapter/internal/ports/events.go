package ports

import (
	"context"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
)

// Events publishes cloud events for lifecycle.
type Events interface {
	// Publish sends ev durably. msgID is derived from what makes the event
	// unique, so publishing it again (after a redelivered command) is
	// deduplicated. An error means the event may not have been stored; the
	// caller retries the whole command.
	Publish(ctx context.Context, msgID string, ev domain.Event) error
}
