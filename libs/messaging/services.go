package messaging

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/backoff"
)

// The services on the bus. Each connects with its own NATS identity (see
// libs/natsauth), named like the service.
const (
	// ServiceLifecycle is the bootstrap service: the only one that creates
	// and updates streams, consumers and buckets (Ensure).
	ServiceLifecycle    = "lifecycle"
	ServiceAPIGateway   = "api-gateway"
	ServiceCloudAdapter = "cloud-adapter"
	ServiceHookRunner   = "hook-runner"
)

// Services lists every service, the bootstrap one first.
func Services() []string {
	return []string{ServiceLifecycle, ServiceAPIGateway, ServiceCloudAdapter, ServiceHookRunner}
}

// InboxPrefix is the reply-subject prefix of service's connections
// (nats.CustomInboxPrefix): a service may subscribe only under its own,
// so it never reads another service's replies.
func InboxPrefix(service string) string { return "_INBOX." + service }

// Needs is the part of the topology a service uses and, not being allowed
// to create it, waits for.
type Needs struct {
	// Consumers maps a stream to the durable consumers bound on it.
	Consumers map[string][]string
	// Buckets are the KV buckets read.
	Buckets []string
}

// NeedsOf returns what service uses of the topology; ok is false for an
// unknown service.
func NeedsOf(service string) (n Needs, ok bool) {
	switch service {
	case ServiceLifecycle:
		return Needs{
			Consumers: map[string][]string{EventStream: {ConsumerLifecycle}},
			Buckets:   []string{BucketGroups, BucketInstances, BucketCatalog},
		}, true
	case ServiceAPIGateway:
		return Needs{Buckets: []string{BucketGroups, BucketInstances, BucketCatalog}}, true
	case ServiceCloudAdapter:
		return Needs{Consumers: map[string][]string{CommandStream: {ConsumerCloudAdapter}}, Buckets: []string{BucketCatalog, BucketOfferings}}, true
	case ServiceHookRunner:
		return Needs{Consumers: map[string][]string{CommandStream: {ConsumerHookRunner}}}, true
	}
	return Needs{}, false
}

// waitWarnAfter is how long WaitTopology logs at Info before it warns.
var waitWarnAfter = 30 * time.Second

// WaitTopology waits until every consumer and bucket of needs exists (the
// bootstrap service, lifecycle, creates them), polling with jittered
// backoff until ctx ends. It logs at Info while the wait is short, then at
// Warn: a topology that never appears means lifecycle is not running (or
// cannot reach JetStream).
func WaitTopology(ctx context.Context, js jetstream.JetStream, needs Needs, log *slog.Logger) error {
	return retryUntil(ctx, log, "waiting for lifecycle to create the JetStream topology",
		func(actx context.Context) error { return topologyPresent(actx, js, needs) })
}

// BindConsumer binds a worker to its durable consumer, retrying with the
// same backoff while JetStream does not answer (a NATS cluster still
// electing its leaders at start) or the consumer is missing, until ctx
// ends: a worker started beside its NATS servers must not exit for that.
func BindConsumer(ctx context.Context, js jetstream.JetStream, stream, name string, log *slog.Logger) (jetstream.Consumer, error) {
	var c jetstream.Consumer
	err := retryUntil(ctx, log, "binding consumer "+name+" on "+stream, func(actx context.Context) (err error) {
		c, err = js.Consumer(actx, stream, name)
		return err
	})
	return c, err
}

// retryUntil runs attempt (each bounded by ensureAttemptTimeout) until it
// succeeds or ctx ends, with jittered backoff, logging what it waits for at
// Info and, after waitWarnAfter, at Warn.
func retryUntil(ctx context.Context, log *slog.Logger, what string, attempt func(context.Context) error) error {
	if log == nil {
		log = slog.Default()
	}
	start := time.Now()
	b := backoff.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: backoff.JitterSpread, Spread: 0.5}.New()
	for {
		actx, cancel := context.WithTimeout(ctx, ensureAttemptTimeout)
		err := attempt(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (gave up: %w)", what, err, ctx.Err())
		}
		d := b.Next()
		lvl := slog.LevelInfo
		if time.Since(start) >= waitWarnAfter {
			lvl = slog.LevelWarn
		}
		log.Log(ctx, lvl, what, "err", err, "waited", time.Since(start).Round(time.Second), "in", d)
		if werr := backoff.Wait(ctx, d); werr != nil {
			return fmt.Errorf("%s: %w (gave up: %w)", what, err, werr)
		}
	}
}

func topologyPresent(ctx context.Context, js jetstream.JetStream, needs Needs) error {
	var errs []error
	for stream, names := range needs.Consumers {
		for _, name := range names {
			if _, err := js.Consumer(ctx, stream, name); err != nil {
				errs = append(errs, fmt.Errorf("consumer %s on %s: %w", name, stream, err))
			}
		}
	}
	for _, b := range needs.Buckets {
		if _, err := js.KeyValue(ctx, b); err != nil {
			errs = append(errs, fmt.Errorf("bucket %s: %w", b, err))
		}
	}
	return errors.Join(errs...)
}
