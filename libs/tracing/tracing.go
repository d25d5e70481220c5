// Package tracing carries OpenTelemetry trace context through NATS message
// headers, so a trace started at a gRPC call continues in the worker that
// handles the resulting command.
package tracing

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
)

// HeaderCarrier adapts nats.Header to propagation.TextMapCarrier.
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier{}

// Get returns the first value of key.
func (c HeaderCarrier) Get(key string) string { return nats.Header(c).Get(key) }

// Set replaces key's values with value.
func (c HeaderCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Propagator is the W3C trace-context and baggage propagator nodesmith uses
// on every hop.
var Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Inject writes ctx's trace context into h (which must be non-nil).
func Inject(ctx context.Context, h nats.Header) {
	Propagator.Inject(ctx, HeaderCarrier(h))
}

// Extract returns ctx enriched with the trace context found in h.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return Propagator.Extract(ctx, HeaderCarrier(h))
}
