// Package leader holds implementations of ports.Leader.
package leader

import (
	"context"
	"log/slog"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

var _ ports.Leader = (*Always)(nil)

// Always makes this process the leader for its whole life: right for a
// single replica and for the embedded stack. Should lead fail, it leads
// again after a backoff (reloading state), rather than giving up.
type Always struct {
	Logger *slog.Logger
}

// Run implements ports.Leader.
func (a *Always) Run(ctx context.Context, lead func(ctx context.Context) error) error {
	log := a.Logger
	if log == nil {
		log = slog.Default()
	}
	backoff := time.Second
	for {
		start := time.Now()
		err := lead(ctx)
		if done(ctx) {
			return nil
		}
		if time.Since(start) > time.Minute {
			backoff = time.Second
		}
		log.Error("leading failed; leading again", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Minute)
	}
}

// done reports whether ctx has ended (its error is the caller's normal stop,
// not a failure to report).
func done(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}
