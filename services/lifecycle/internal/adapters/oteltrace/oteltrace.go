// Package oteltrace implements ports.Tracer with OpenTelemetry: spans come
// from the global TracerProvider (telemetry.Tracer) and carriers are W3C
// trace-context text maps (libs/tracing.Propagator), the same format that
// travels in NATS headers.
package oteltrace

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/nodesmith/nodesmith/libs/tracing"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/telemetry"
)

// maxLinks bounds the links of one span: a command covering a hundred
// instances created by a hundred operations links the first few only.
const maxLinks = 32

// Tracer implements ports.Tracer.
type Tracer struct{}

var _ ports.Tracer = Tracer{}

// Start implements ports.Tracer.
func (Tracer) Start(ctx context.Context, name string, o ports.SpanOptions) (context.Context, ports.Span) {
	var (
		parent trace.SpanContext
		links  []trace.Link
		seen   = map[[2]string]bool{}
	)
	for _, c := range o.Parents {
		if len(c) == 0 {
			continue
		}
		sc := trace.SpanContextFromContext(tracing.Propagator.Extract(context.Background(), propagation.MapCarrier(c)))
		key := [2]string{sc.TraceID().String(), sc.SpanID().String()}
		if !sc.IsValid() || seen[key] {
			continue
		}
		seen[key] = true
		if !parent.IsValid() {
			parent = sc
			continue
		}
		if len(links) < maxLinks {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	ctx, span := telemetry.Tracer().Start(ctx, name, trace.WithLinks(links...), trace.WithAttributes(attrs(o.Attributes)...))
	return ctx, otelSpan{span}
}

// Carrier implements ports.Tracer.
func (Tracer) Carrier(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := propagation.MapCarrier{}
	// Only the trace context: baggage would grow every record.
	propagation.TraceContext{}.Inject(ctx, c)
	if len(c) == 0 {
		return nil
	}
	return c
}

type otelSpan struct{ s trace.Span }

func (s otelSpan) SetAttributes(as ...ports.Attribute) { s.s.SetAttributes(attrs(as)...) }

func (s otelSpan) End(err error) {
	if err != nil {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, err.Error())
	}
	s.s.End()
}

func attrs(as []ports.Attribute) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(as))
	for _, a := range as {
		switch v := a.Value.(type) {
		case string:
			out = append(out, attribute.String(a.Key, v))
		case bool:
			out = append(out, attribute.Bool(a.Key, v))
		case int:
			out = append(out, attribute.Int(a.Key, v))
		case int64:
			out = append(out, attribute.Int64(a.Key, v))
		}
	}
	return out
}
