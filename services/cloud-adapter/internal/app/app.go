// Package app holds the cloud adapter's use cases: create a batch of VMs,
// watch VMs until they settle, terminate VMs, and list a cluster's VMs. Each
// turns one cloud command into cloud calls (through ports.Cloud) and events
// (through ports.Events). Handlers are idempotent, because commands are
// delivered at least once: creates are keyed by ClientToken, and every event
// has a deterministic message id so a re-published event is deduplicated.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// ErrInvalidCommand marks a command that can never be handled (no body, no
// batch id, ...): the caller should drop it rather than redeliver it.
var ErrInvalidCommand = errors.New("invalid cloud command")

// ErrHandedBack is returned by a long-running handler interrupted by
// shutdown: its command should be redelivered to another replica soon.
var ErrHandedBack = errors.New("service stopping: command handed back for redelivery")

// Options tune the use cases.
type Options struct {
	// PollInterval is the pause between Describe rounds of a watch once
	// nothing changed for FastPollFor.
	PollInterval time.Duration
	// FastPollInterval is the pause between rounds while the watch is young
	// or something changed within FastPollFor: a VM becomes RUNNING on
	// average half a pause before it is seen, so the pause is short while
	// a change is likely (VMs are booting) and long otherwise (a VM that
	// will not boot soon, a throttled account). Capped at PollInterval.
	FastPollInterval time.Duration
	// FastPollFor is how long after its start or its last observed change
	// a watch polls every FastPollInterval.
	FastPollFor time.Duration
	// MaxWatch bounds one watch; lifecycle's deadlines cover the rest.
	MaxWatch time.Duration
	// NotFoundGrace is how long a watched VM must stay absent before it is
	// reported NOT_FOUND (new VMs can be briefly invisible).
	NotFoundGrace time.Duration
	// Stopping is closed when the service starts shutting down; watches
	// then hand their command back instead of holding up shutdown.
	Stopping <-chan struct{}
	// Now is the clock; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
	// OpenParameter opens a template secret parameter (a libs/sealed
	// token of the parameter's JSON value, bound to its name); nil: a
	// create command with secret parameters fails (no --secrets-key-file).
	OpenParameter func(name, token string) (string, error)
	// Marks are the offerings found out of capacity, shared by every
	// replica; nil: a create with offerings still moves on to the next
	// offering after a capacity answer, but no offering is ever skipped.
	Marks ports.OfferingMarks
	// OfferingUnavailableTTL is how long an offering that answered out of
	// capacity is skipped (3 minutes if not positive).
	OfferingUnavailableTTL time.Duration
	// Metrics counts what offerings did; nil records nothing.
	Metrics ports.OfferingMetrics
}

// DefaultOfferingUnavailableTTL is Options.OfferingUnavailableTTL's
// default (Karpenter's).
const DefaultOfferingUnavailableTTL = 3 * time.Minute

// Delivery describes how the command being handled was delivered.
type Delivery struct {
	// Attempt counts deliveries, 1 for the first.
	Attempt uint64
	// Last is set when no redelivery will follow. A retryable failure is
	// then reported in an event instead of being left to a redelivery that
	// will never come.
	Last bool
}

// Service handles cloud commands.
type Service struct {
	clouds map[string]ports.Cloud
	events ports.Events
	o      Options
	log    *slog.Logger
}

// New returns a Service driving clouds (by provider name, as commands name
// them in Target.provider) and publishing on events.
func New(clouds map[string]ports.Cloud, events ports.Events, o Options) *Service {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 3 * time.Second
	}
	if o.FastPollInterval <= 0 {
		o.FastPollInterval = time.Second
	}
	o.FastPollInterval = min(o.FastPollInterval, o.PollInterval)
	if o.FastPollFor < 0 {
		o.FastPollFor = 0
	}
	if o.OfferingUnavailableTTL <= 0 {
		o.OfferingUnavailableTTL = DefaultOfferingUnavailableTTL
	}
	if o.Metrics == nil {
		o.Metrics = ports.NoMetrics{}
	}
	if o.MaxWatch <= 0 {
		o.MaxWatch = 10 * time.Minute
	}
	return &Service{clouds: clouds, events: events, o: o, log: o.Logger}
}

// PollAfter is the pause before the next Describe round of a watch whose
// last change (or start) was sinceChange ago.
func (o Options) PollAfter(sinceChange time.Duration) time.Duration {
	if sinceChange < o.FastPollFor {
		return min(o.FastPollInterval, o.PollInterval)
	}
	return o.PollInterval
}

// UntilNextRound is how long a watch whose last change (or start) was at
// lastChange waits at now before its next Describe round. Rounds fall on
// multiples of the pause (PollAfter) on the wall clock, so the watches of
// VMs that boot together (each create command watches its own VMs) see
// them run in the same round: their create slots free together, and
// lifecycle's next batch is one full create call rather than one per
// slice of freed slots.
func (o Options) UntilNextRound(now, lastChange time.Time) time.Duration {
	pause := o.PollAfter(now.Sub(lastChange))
	return now.Truncate(pause).Add(pause).Sub(now)
}

// Handle runs one command. nil means done (ack); an error wrapping
// ErrInvalidCommand means never retry; any other error means retry later
// (the command is idempotent).
func (s *Service) Handle(ctx context.Context, cmd domain.Command, d Delivery) error {
	switch c := cmd.(type) {
	case *domain.CreateInstances:
		return s.Create(ctx, c, d)
	case *domain.WatchInstances:
		return s.Watch(ctx, c, d)
	case *domain.TerminateInstances:
		return s.Terminate(ctx, c, d)
	case *domain.ListInventory:
		return s.ListInventory(ctx, c, d)
	case *domain.TagInstances:
		return s.TagInstances(ctx, c, d)
	default:
		return fmt.Errorf("%w: command has no known body", ErrInvalidCommand)
	}
}

// cloud resolves a command's target to its provider's adapter.
func (s *Service) cloud(t domain.Target) (ports.Cloud, ports.Target, error) {
	c, ok := s.clouds[t.Provider]
	if !ok {
		return nil, ports.Target{}, ports.NewInvalidParametersError("UnknownProvider",
			fmt.Sprintf("no cloud adapter for provider %q", t.Provider))
	}
	return c, ports.Target{Account: t.Account, Region: t.Region}, nil
}

// reportable says whether a failed cloud call is reported in an event now
// rather than retried through a redelivery.
func reportable(err error, d Delivery) bool {
	return !ports.IsRetryable(err) || d.Last
}

// eventError is err as an event reports it: its CloudError, or an error of
// unknown kind with err's text.
func eventError(err error) *domain.CloudError {
	ce, ok := ports.AsCloudError(err)
	if !ok {
		return &domain.CloudError{Kind: ports.ErrorKindUnknown, Message: err.Error()}
	}
	return &domain.CloudError{Kind: ce.Kind, Code: ce.Code, Message: ce.Message}
}

// sleep waits d, returning early with ctx's error or ErrHandedBack.
func (s *Service) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.o.Stopping:
		return ErrHandedBack
	case <-t.C:
		return nil
	}
}
