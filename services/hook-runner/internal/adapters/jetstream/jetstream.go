package jetstream

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/worker"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/app"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/ports"
)

var _ ports.ResultPublisher = (*ResultPublisher)(nil)

// Handler returns the worker.Handler for the hook-runner consumer: decode,
// run, publish. An undecodable command is terminated; a run interrupted by
// shutdown or a result that could not be published is redelivered.
func Handler(runner *app.Runner) worker.Handler {
	tracer := otel.Tracer("github.com/nodesmith/nodesmith/services/hook-runner")
	return func(ctx context.Context, msg jetstream.Msg) error {
		h, err := decodeRunHook(msg.Data())
		if err != nil {
			return worker.Permanent(err)
		}
		ctx, span := tracer.Start(ctx, "hook.run")
		defer span.End()
		span.SetAttributes(
			attribute.String("nodesmith.instance", h.InstanceID),
			attribute.String("nodesmith.group", h.Group),
			attribute.String("nodesmith.hook", h.Kind.String()),
			attribute.Int64("nodesmith.attempt", int64(h.Attempt)),
		)
		if err := runner.Handle(ctx, h); err != nil {
			span.SetStatus(codes.Error, err.Error())
			return err
		}
		return nil
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

// Publish implements ports.ResultPublisher.
func (p *ResultPublisher) Publish(ctx context.Context, r domain.Result) error {
	if _, err := p.pub.Publish(ctx, ResultSubject, ResultMsgID(r), encodeResult(r)); err != nil {
		return fmt.Errorf("publishing hook result: %w", err)
	}
	return nil
}
