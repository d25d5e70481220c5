// Package ports declares what the gateway's application needs from the
// outside world. Adapters implement these interfaces; the application only
// sees them.
package ports

import (
	"context"

	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"
)

// Revisions are the KV revisions an operation wrote, per bucket; zero means
// nothing was written in that bucket.
type Revisions struct {
	Groups    uint64
	Instances uint64
	Catalog   uint64
	// Adopted is an AdoptVMs answer: the outcome per VM.
	Adopted []*lifecyclev1.AdoptOutcome
}

// Lifecycle performs state-changing operations on the lifecycle service,
// the only writer of state.
type Lifecycle interface {
	// Do sends req and waits for the lifecycle leader's answer, at most
	// until ctx ends. req.request_id identifies the operation across
	// attempts (Do fills one in when it is empty); lifecycle applies an
	// operation at most once per id and answers a repeat with the first
	// outcome, so Do may retry an attempt that went unanswered.
	//
	// On success the operation was applied and the returned revisions are
	// those it wrote. Otherwise the error is a *domain.Error:
	//   - the code and message lifecycle answered (Reply.error): the
	//     operation was rejected and nothing was written;
	//   - Unavailable: no lifecycle leader answered (nothing was applied);
	//   - DeadlineExceeded: the request may have reached the leader but no
	//     answer came in time, so the outcome is unknown;
	//   - Internal: the answer could not be decoded.
	// Do retries on its own while no leader answers and after an
	// unanswered attempt, always with the same request id.
	Do(ctx context.Context, req *lifecyclev1.Request) (Revisions, error)
}
