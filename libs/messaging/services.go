package messaging

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
		return Needs{Consumers: map[string][]string{CommandStream: {ConsumerCloudAdapter}}, Buckets: []string{BucketCatalog}}, true
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
	if log == nil {
		log = slog.Default()
	}
	start := time.Now()
	backoff := 100 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, ensureAttemptTimeout)
		err := topologyPresent(actx, js, needs)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for the JetStream topology (lifecycle creates it): %w (gave up: %w)", err, ctx.Err())
		}
		d := backoff/2 + time.Duration(mrand.Int64N(int64(backoff)))
		lvl := slog.LevelInfo
		if time.Since(start) >= waitWarnAfter {
			lvl = slog.LevelWarn
		}
		log.Log(ctx, lvl, "waiting for lifecycle to create the JetStream topology", "missing", err, "waited", time.Since(start).Round(time.Second), "in", d)
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the JetStream topology (lifecycle creates it): %w (gave up: %w)", err, ctx.Err())
		case <-time.After(d):
		}
		backoff = min(backoff*2, 5*time.Second)
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
