package jetstream

import (
	"context"
	"fmt"

	"github.com/nodesmith/nodesmith/libs/tracing"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/worker"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/app"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/ports"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/telemetry"
)

var _ ports.ResultPublisher = (*ResultPublisher)(nil)

// Handler returns the worker.Handler for the hook-runner consumer: decode,
// run, publish. An undecodable command is terminated; a run interrupted by
// shutdown or a result that could not be published is redelivered.
//
// Each delivery is a consumer span, a child of the trace context that
// libs/worker extracted from the message headers into ctx; the SSH
// connection, the script and the result's publication are its children.
func Handler(runner *app.Runner) worker.Handler {
	return func(ctx context.Context, msg jetstream.Msg) error {
		ctx, span, _ := tracing.StartConsumer(ctx, telemetry.Tracer(), msg)
		defer span.End()
		h, err := decodeRunHook(msg.Data())
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "undecodable command")
			return worker.Permanent(err)
		}
		span.SetAttributes(hookAttributes(h)...)
		if err := runner.Handle(ctx, h); err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "hook not finished; redelivering")
			return err
		}
		return nil
	}
}

// hookAttributes describe a hook on its span. The script and the
// environment are left out: they carry join tokens and other secrets.
func hookAttributes(h domain.Hook) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("nodesmith.instance", h.InstanceID),
		attribute.String("nodesmith.group", h.Group),
		attribute.String("nodesmith.hook", h.Kind.String()),
		attribute.String("nodesmith.hook_name", h.Name),
		attribute.Int64("nodesmith.attempt", int64(h.Attempt)),
		attribute.String("server.address", h.Host),
		attribute.Bool("nodesmith.host_key_pinned", h.PinnedHostKey != ""),
	}
}

// ResultPublisher publishes results on ResultSubject.
type ResultPublisher struct {
	pub *messaging.Publisher
}

// NewResultPublisher returns a publisher on js.
func NewResultPublisher(js jetstream.JetStream) *ResultPublisher {
	return &ResultPublisher{pub: messaging.NewPublisher(js)}
}

// Publish implements ports.ResultPublisher. The result travels with the
// trace context of ctx (a producer span, child of the hook's span), so
// lifecycle's handling of it continues the same trace.
func (p *ResultPublisher) Publish(ctx context.Context, r domain.Result) error {
	msgID := ResultMsgID(r)
	ctx, span := tracing.StartProducer(ctx, telemetry.Tracer(), ResultSubject, msgID,
		attribute.String("nodesmith.instance", r.InstanceID),
		attribute.String("nodesmith.hook", r.Kind.String()),
		attribute.Int64("nodesmith.attempt", int64(r.Attempt)),
		attribute.Bool("nodesmith.hook_succeeded", r.Succeeded),
		attribute.Bool("nodesmith.hook_skipped", r.Skipped),
		attribute.Int("nodesmith.exit_code", r.ExitCode),
		attribute.String("nodesmith.failure", r.Failure.String()),
		attribute.Bool("nodesmith.retryable", r.Retryable),
	)
	defer span.End()
	if _, err := p.pub.Publish(ctx, ResultSubject, msgID, encodeResult(r)); err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "publish failed")
		return fmt.Errorf("publishing hook result: %w", err)
	}
	return nil
}
