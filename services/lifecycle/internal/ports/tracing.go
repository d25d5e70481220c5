package ports

import "context"

// Tracer starts the spans of lifecycle's own work (command dispatch,
// reconciler passes) and converts trace contexts to and from the opaque
// carrier an instance's record keeps, so a command dispatched long after
// the operation that caused it continues that operation's trace. The
// application sees only this port; OpenTelemetry stays in an adapter.
type Tracer interface {
	// Start begins a span named name. Its parent is the first of
	// o.Parents that holds a valid trace context, else ctx's span (a new
	// trace when ctx has none); the other valid parents become links. The
	// returned context carries the new span.
	Start(ctx context.Context, name string, o SpanOptions) (context.Context, Span)
	// Carrier returns the trace context of ctx's span as a text-map
	// carrier (W3C traceparent and tracestate), or nil when ctx carries
	// none.
	Carrier(ctx context.Context) map[string]string
}

// SpanOptions configure Tracer.Start.
type SpanOptions struct {
	// Parents are carriers returned by Tracer.Carrier (nil entries are
	// skipped).
	Parents []map[string]string
	// Attributes describe the span.
	Attributes []Attribute
}

// Attribute is one span attribute. Value is a string, bool, int or int64.
type Attribute struct {
	Key   string
	Value any
}

// Span is a started span.
type Span interface {
	// SetAttributes adds attributes.
	SetAttributes(attrs ...Attribute)
	// End ends the span, recording err as its error status when non-nil.
	End(err error)
}
