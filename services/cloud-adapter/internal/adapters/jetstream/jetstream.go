// Package jetstream connects the cloud adapter to NATS JetStream: Events
// publishes cloud events (the ports.Events adapter) and Consume feeds cloud
// commands from the shared durable consumer to the application.
package jetstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/nodesmith/nodesmith/libs/tracing"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/worker"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/protoconv"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/app"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/metrics"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/telemetry"
)

// Event kinds: the last token of an event's subject.
const (
	KindCreated         = "created"
	KindCreateFailed    = "create_failed"
	KindObserved        = "observed"
	KindTerminated      = "terminated"
	KindTerminateFailed = "terminate_failed"
	KindInventory       = "inventory"
	KindTagged          = "tagged"
)

// Kind returns the subject kind of ev, or "" for an unknown event.
func Kind(ev domain.Event) string {
	switch ev.(type) {
	case *domain.InstancesCreated:
		return KindCreated
	case *domain.CreateFailed:
		return KindCreateFailed
	case *domain.InstanceObserved:
		return KindObserved
	case *domain.InstancesTerminated:
		return KindTerminated
	case *domain.TerminateFailed:
		return KindTerminateFailed
	case *domain.Inventory:
		return KindInventory
	case *domain.InstancesTagged:
		return KindTagged
	default:
		return ""
	}
}

// Events publishes cloud events on messaging.SubjectCloudEvents + ".<kind>".
type Events struct {
	pub     *messaging.Publisher
	metrics *metrics.Cloud
}

var _ ports.Events = (*Events)(nil)

// NewEvents returns an Events publishing through js.
func NewEvents(js natsjs.JetStream, m *metrics.Cloud) *Events {
	return &Events{pub: messaging.NewPublisher(js), metrics: m}
}

// Publish implements ports.Events: ev goes on the wire as its
// nodesmith.cloud.v1.Event (protoconv.Event).
func (e *Events) Publish(ctx context.Context, msgID string, ev domain.Event) error {
	kind := Kind(ev)
	if kind == "" {
		return errors.New("refusing to publish an empty cloud event")
	}
	wire := protoconv.Event(ev)
	subject := messaging.SubjectCloudEvents + "." + kind
	// The producer span is a child of the command's span; the publisher
	// injects its context into the headers, so lifecycle's handling of the
	// event continues the trace.
	ctx, span := tracing.StartProducer(ctx, telemetry.Tracer(), subject, msgID)
	defer span.End()
	if _, err := e.pub.Publish(ctx, subject, msgID, wire); err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "publish failed")
		return err
	}
	e.metrics.EventPublished(kind)
	return nil
}

// Handler handles one decoded command (app.Service does).
type Handler interface {
	Handle(ctx context.Context, cmd domain.Command, d app.Delivery) error
}

// Consume runs h on the commands of cons with libs/worker (bounded
// concurrency, heartbeats, nak with backoff, graceful drain) until ctx
// ends. maxDeliver is the consumer's MaxDeliver (<= 0: unlimited), which
// tells the handler when a delivery is the last one. Undecodable and
// invalid commands are terminated, never redelivered.
func Consume(ctx context.Context, cons natsjs.Consumer, h Handler, o worker.Options, maxDeliver int) error {
	return worker.Run(ctx, cons, o, func(ctx context.Context, msg natsjs.Msg) error {
		// ctx carries the trace context libs/worker extracted from the
		// headers, so this span continues lifecycle's trace.
		ctx, span, attempt := tracing.StartConsumer(ctx, telemetry.Tracer(), msg)
		d := app.Delivery{Attempt: attempt, Last: maxDeliver > 0 && attempt >= uint64(maxDeliver)}
		span.SetAttributes(attribute.Bool("nodesmith.last_delivery", d.Last))
		defer span.End()
		var cmd cloudv1.Command
		if err := proto.Unmarshal(msg.Data(), &cmd); err != nil {
			err = fmt.Errorf("decoding cloud command on %s: %w", msg.Subject(), err)
			span.SetAttributes(attribute.String("nodesmith.outcome", "dropped"))
			span.RecordError(err)
			span.SetStatus(codes.Error, "undecodable command")
			return worker.Permanent(err)
		}
		span.SetAttributes(commandAttributes(&cmd)...)
		err := h.Handle(ctx, protoconv.Command(&cmd), d)
		switch {
		case err == nil:
			span.SetAttributes(attribute.String("nodesmith.outcome", "done"))
		case errors.Is(err, app.ErrInvalidCommand):
			span.SetAttributes(attribute.String("nodesmith.outcome", "dropped"))
			span.RecordError(err)
			span.SetStatus(codes.Error, "invalid command")
			return worker.Permanent(err)
		default:
			span.SetAttributes(attribute.String("nodesmith.outcome", "redeliver"))
			span.RecordError(err)
			span.SetStatus(codes.Error, "command failed; redelivering")
		}
		return err
	})
}
