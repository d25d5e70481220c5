package tracing

import (
	"context"
	"math"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// StartConsumer starts the consumer span of one delivery of msg, named
// "process <subject>" with OpenTelemetry's messaging attributes and the
// delivery count (nodesmith.delivery). ctx should carry the context
// libs/worker extracted from the message headers, so the span continues the
// publisher's trace. It also returns the delivery count (1 when the
// metadata cannot be read).
func StartConsumer(ctx context.Context, tracer trace.Tracer, msg jetstream.Msg, attrs ...attribute.KeyValue) (context.Context, trace.Span, uint64) {
	var delivered uint64 = 1
	if meta, err := msg.Metadata(); err == nil {
		delivered = meta.NumDelivered
	}
	attrs = append([]attribute.KeyValue{
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", msg.Subject()),
		attribute.String("messaging.message.id", msg.Headers().Get(jetstream.MsgIDHeader)),
		attribute.Int64("nodesmith.delivery", int64(min(delivered, math.MaxInt64))),
	}, attrs...)
	ctx, span := tracer.Start(ctx, "process "+msg.Subject(), trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	return ctx, span, delivered
}

// StartProducer starts the producer span of publishing one message, named
// "publish <subject>" with OpenTelemetry's messaging attributes. The
// publisher injects its context into the message headers, so the
// consumer's span (StartConsumer) is its child.
func StartProducer(ctx context.Context, tracer trace.Tracer, subject, msgID string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	attrs = append([]attribute.KeyValue{
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.destination.name", subject),
		attribute.String("messaging.message.id", msgID),
	}, attrs...)
	return tracer.Start(ctx, "publish "+subject, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
}
