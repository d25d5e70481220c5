package jetstream

import (
	"context"
	"errors"

	"github.com/nodesmith/nodesmith/libs/tracing"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/nodesmith/nodesmith/libs/worker"
	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/telemetry"
)

// startOpSpan starts the server span of one operation. ctx carries the
// context the gateway injected into the request headers, so the span is a
// child of the gateway's client span; the instances the operation creates
// or releases carry this span's context to their later commands.
func startOpSpan(ctx context.Context, req *lifecyclev1.Request) (context.Context, trace.Span) {
	op := lifecyclev1.OpName(req)
	return telemetry.Tracer().Start(ctx, "lifecycle "+op, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("messaging.system", "nats"),
		attribute.String("nodesmith.lifecycle.op", op),
		attribute.String("nodesmith.request_id", req.GetRequestId()),
		attribute.String("nodesmith.group", opGroup(req)),
	))
}

func opGroup(req *lifecyclev1.Request) string {
	switch op := req.GetOp().(type) {
	case *lifecyclev1.Request_IncreaseSize:
		return op.IncreaseSize.GetGroup()
	case *lifecyclev1.Request_DecreaseTargetSize:
		return op.DecreaseTargetSize.GetGroup()
	case *lifecyclev1.Request_DeleteNodes:
		return op.DeleteNodes.GetGroup()
	case *lifecyclev1.Request_PutGroup:
		return op.PutGroup.GetGroup().GetId()
	case *lifecyclev1.Request_DeleteGroup:
		return op.DeleteGroup.GetId()
	case *lifecyclev1.Request_SetTargetSize:
		return op.SetTargetSize.GetGroup()
	}
	return ""
}

func endOpSpan(span trace.Span, reply *lifecyclev1.Reply) {
	if e := reply.GetError(); e != nil {
		span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(e.GetCode())))
		span.SetStatus(codes.Error, e.GetMessage())
	}
	span.End()
}

// tracedEvents wraps the event handler in a consumer span per message. ctx
// carries the context libs/worker extracted from the headers (the worker's
// publish span), so handling a result continues the command's trace.
func tracedEvents(h worker.Handler) worker.Handler {
	return func(ctx context.Context, msg jetstream.Msg) error {
		ctx, span, _ := tracing.StartConsumer(ctx, telemetry.Tracer(), msg)
		defer span.End()
		err := h(ctx, msg)
		switch {
		case err == nil:
			span.SetAttributes(attribute.String("nodesmith.outcome", "done"))
		case worker.IsPermanent(err):
			span.SetAttributes(attribute.String("nodesmith.outcome", "dropped"))
			span.RecordError(err)
			span.SetStatus(codes.Error, "dropped")
		default:
			span.SetAttributes(attribute.String("nodesmith.outcome", "redeliver"))
			span.RecordError(err)
			span.SetStatus(codes.Error, "redelivering")
		}
		return err
	}
}

// publishSpan starts the producer span of one command; the publisher
// injects its context into the message headers, so the worker's span is its
// child.
func publishSpan(ctx context.Context, subject, msgID string) (context.Context, func(error)) {
	ctx, span := tracing.StartProducer(ctx, telemetry.Tracer(), subject, msgID)
	return ctx, func(err error) {
		if err != nil && !errors.Is(err, context.Canceled) {
			span.RecordError(err)
			span.SetStatus(codes.Error, "publish failed")
		}
		span.End()
	}
}
