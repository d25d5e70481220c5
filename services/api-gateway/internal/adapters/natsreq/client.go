// Package natsreq sends lifecycle operations over NATS request/reply
// (messaging.SubjectLifecycleOps). Only the lifecycle leader subscribes, so
// "no responders" means "no leader right now" and is retried with backoff
// until the caller's deadline.
package natsreq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/backoff"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/tracing"
	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/ports"
)

// TracerName names the tracer of the lifecycle client spans.
const TracerName = "github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/natsreq"

// Options configure a Client.
type Options struct {
	// Subject defaults to messaging.SubjectLifecycleOps.
	Subject string
	// AttemptTimeout bounds one attempt; an unanswered attempt is retried
	// with the same request id (a leader that died mid-request is
	// bypassed, and lifecycle answers a repeat with the first outcome).
	AttemptTimeout time.Duration
	// MinBackoff and MaxBackoff bound the jittered wait between attempts.
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
	// TracerProvider creates the client span of each operation; nil means
	// the global provider.
	TracerProvider trace.TracerProvider
}

// Client implements ports.Lifecycle over NATS request/reply.
type Client struct {
	nc     *nats.Conn
	opt    Options
	tracer trace.Tracer
}

var _ ports.Lifecycle = (*Client)(nil)

// New returns a Client on nc.
func New(nc *nats.Conn, o Options) *Client {
	if o.Subject == "" {
		o.Subject = messaging.SubjectLifecycleOps
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = 1500 * time.Millisecond
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 25 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(o.MinBackoff, 400*time.Millisecond)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	tp := o.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Client{nc: nc, opt: o, tracer: tp.Tracer(TracerName)}
}

// Do implements ports.Lifecycle: req goes on the wire as its
// nodesmith.lifecycle.v1.Request (see Request). Every attempt carries the
// same request_id (req.ID, or a new one when it has none), which is what
// makes retrying an unanswered attempt safe for every operation: lifecycle
// applies an operation at most once per request id and answers a repeat
// with the first outcome.
func (c *Client) Do(ctx context.Context, in ports.Request) (revs ports.Revisions, err error) {
	if in.ID == "" {
		in.ID = nuid.Next()
	}
	req, err := Request(in)
	if err != nil {
		return ports.Revisions{}, domain.Errorf(contract.CodeInvalidArgument, "lifecycle request: %v", err)
	}
	id := req.GetRequestId()
	op := lifecyclev1.OpName(req)
	ctx, span := c.tracer.Start(ctx, "lifecycle "+op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.destination.name", c.opt.Subject),
		attribute.String("nodesmith.lifecycle.op", op),
		attribute.String("nodesmith.request_id", id),
	))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(otelcodes.Error, domain.CodeOf(err).String())
		}
		span.End()
	}()

	data, err := proto.Marshal(req)
	if err != nil {
		return ports.Revisions{}, domain.Errorf(contract.CodeInternal, "encoding lifecycle request: %v", err)
	}
	b := backoff.Policy{Initial: c.opt.MinBackoff, Max: c.opt.MaxBackoff}.New()
	// mayHaveApplied turns "nobody answered" into "outcome unknown" once an
	// attempt reached a responder that then went quiet.
	mayHaveApplied := false
	for attempt := 1; ; attempt++ {
		span.SetAttributes(attribute.Int("nodesmith.attempts", attempt))
		msg := &nats.Msg{Subject: c.opt.Subject, Data: data, Header: nats.Header{}}
		// The span context travels with the request, so lifecycle's
		// handling continues the trace of CA's (or an operator's) call.
		tracing.Inject(ctx, msg.Header)

		actx, cancel := context.WithTimeout(ctx, c.opt.AttemptTimeout)
		if _, adopt := req.GetOp().(*lifecyclev1.Request_AdoptVms); adopt {
			// An adoption waits on the cloud adapter (twice): one attempt
			// gets the caller's whole deadline rather than being repeated
			// alongside itself.
			cancel()
			actx, cancel = context.WithCancel(ctx)
		}
		resp, err := c.nc.RequestMsgWithContext(actx, msg)
		cancel()
		if err == nil {
			return decodeReply(resp.Data)
		}
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			// No leader subscribed: nothing was delivered, safe to retry.
		case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining):
			return ports.Revisions{}, domain.Errorf(contract.CodeUnavailable, "lifecycle request: NATS connection closed")
		case ctx.Err() != nil:
			// The caller's deadline ended an attempt that a leader may
			// have received.
			return ports.Revisions{}, c.giveUp(ctx, id, op, attempt, true, err)
		default:
			// An unanswered attempt or a transport error: a leader may have
			// received it (and applied it, in which case the retry gets
			// the first outcome).
			mayHaveApplied = true
		}
		c.opt.Logger.DebugContext(ctx, "lifecycle request not answered, retrying", "request_id", id, "op", op, "attempt", attempt, "err", err)
		// Jitter keeps gateway replicas from retrying in lockstep
		// while a new leader takes over.
		if backoff.Wait(ctx, b.Next()) != nil {
			return ports.Revisions{}, c.giveUp(ctx, id, op, attempt, mayHaveApplied, err)
		}
	}
}

func (c *Client) giveUp(ctx context.Context, id, op string, attempts int, mayHaveApplied bool, last error) error {
	c.opt.Logger.WarnContext(ctx, "lifecycle request gave up", "request_id", id, "op", op, "attempts", attempts, "outcome_unknown", mayHaveApplied, "err", last)
	if mayHaveApplied {
		return domain.Errorf(contract.CodeDeadlineExceeded, "lifecycle did not answer in time; the operation may still be applied (request %s, %d attempts)", id, attempts)
	}
	return domain.Errorf(contract.CodeUnavailable, "no lifecycle leader answered (%d attempts): %v", attempts, last)
}

func decodeReply(data []byte) (ports.Revisions, error) {
	var r lifecyclev1.Reply
	if err := proto.Unmarshal(data, &r); err != nil {
		return ports.Revisions{}, domain.Errorf(contract.CodeInternal, "decoding lifecycle reply: %v", err)
	}
	if e := r.GetError(); e != nil {
		code := domain.Code(e.GetCode())
		if code == contract.CodeOK || e.GetCode() < 0 || code > contract.CodeUnauthenticated {
			code = contract.CodeInternal
		}
		msg := e.GetMessage()
		if msg == "" {
			msg = fmt.Sprintf("lifecycle rejected the operation (%s)", code)
		}
		return ports.Revisions{}, &domain.Error{Code: code, Msg: msg}
	}
	return ports.Revisions{Groups: r.GetGroupsRevision(), Instances: r.GetInstancesRevision(), Catalog: r.GetCatalogRevision(),
		Adopted: adoptOutcomes(r.GetAdopted())}, nil
}
