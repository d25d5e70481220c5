package app

import (
	"context"
	"maps"
	"slices"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// Tracing in lifecycle: an operation (its span is started by the inbound
// adapter from the trace context the gateway sent) stamps the trace context
// on the instances it creates or releases; the dispatcher, which publishes
// their commands later and asynchronously, starts each publication's span
// as a child of that stamped context. Workers continue the trace from the
// message headers and their result events come back in the same trace.

type nopTracer struct{}

func (nopTracer) Start(ctx context.Context, _ string, _ ports.SpanOptions) (context.Context, ports.Span) {
	return ctx, nopSpan{}
}

func (nopTracer) Carrier(context.Context) map[string]string { return nil }

type nopSpan struct{}

func (nopSpan) SetAttributes(...ports.Attribute) {}
func (nopSpan) End(error)                        {}

// traceParentsLocked returns, per outbox item, the trace contexts of the
// instances it covers (in instance id order, without repeats).
func (sc *scheduler) traceParentsLocked(items []outboxItem) [][]map[string]string {
	out := make([][]map[string]string, len(items))
	for i, it := range items {
		seen := map[string]bool{}
		for _, id := range slices.Sorted(maps.Keys(it.covers)) {
			r, ok := sc.insts[id]
			if !ok || len(r.Instance.TraceContext) == 0 {
				continue
			}
			key := r.Instance.TraceContext["traceparent"]
			if seen[key] {
				continue
			}
			seen[key] = true
			out[i] = append(out[i], r.Instance.TraceContext)
		}
	}
	return out
}

// publishTraced publishes one outbox item in a span whose parent is the
// trace of the first instance it covers (the others are linked).
func (sc *scheduler) publishTraced(ctx context.Context, it outboxItem, parents []map[string]string) error {
	ctx, span := sc.tracer.Start(ctx, "dispatch "+it.kind.String(), ports.SpanOptions{
		Parents: parents,
		Attributes: []ports.Attribute{
			{Key: "nodesmith.command", Value: it.kind.String()},
			{Key: "nodesmith.instances", Value: len(it.covers)},
		},
	})
	err := it.publish(ctx)
	span.End(err)
	return err
}
