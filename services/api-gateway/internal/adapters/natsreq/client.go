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
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/tracing"
	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/ports"
)

// HeaderRequestID carries one id per logical operation, the same on every
// retry, so lifecycle can correlate (and could deduplicate) attempts.
const HeaderRequestID = "Nodesmith-Request-Id"

// Options configure a Client.
type Options struct {
	// Subject defaults to messaging.SubjectLifecycleOps.
	Subject string
	// AttemptTimeout bounds one attempt of an operation that is safe to
	// send twice; an unanswered attempt is then retried (a leader that
	// died mid-request is bypassed). Other operations wait for their one
	// delivered attempt until the caller's deadline.
	AttemptTimeout time.Duration
	// MinBackoff and MaxBackoff bound the jittered wait between attempts.
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
}

// Client implements ports.Lifecycle over NATS request/reply.
type Client struct {
	nc  *nats.Conn
	opt Options
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
	return &Client{nc: nc, opt: o}
}

// Do implements ports.Lifecycle.
func (c *Client) Do(ctx context.Context, req *lifecyclev1.Request) (ports.Revisions, error) {
	data, err := proto.Marshal(req)
	if err != nil {
		return ports.Revisions{}, domain.Errorf(domain.CodeInternal, "encoding lifecycle request: %v", err)
	}
	retrySafe := RetrySafe(req)
	id := nuid.Next()
	backoff := c.opt.MinBackoff
	// mayHaveApplied turns "nobody answered" into "outcome unknown" once an
	// attempt reached a responder that then went quiet.
	mayHaveApplied := false
	for attempt := 1; ; attempt++ {
		msg := &nats.Msg{Subject: c.opt.Subject, Data: data, Header: nats.Header{}}
		msg.Header.Set(HeaderRequestID, id)
		tracing.Inject(ctx, msg.Header)

		actx, cancel := ctx, context.CancelFunc(func() {})
		if retrySafe {
			actx, cancel = context.WithTimeout(ctx, c.opt.AttemptTimeout)
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
			return ports.Revisions{}, domain.Errorf(domain.CodeUnavailable, "lifecycle request: NATS connection closed")
		case ctx.Err() != nil:
			// The caller's deadline ended an attempt that a leader may
			// have received.
			return ports.Revisions{}, c.giveUp(ctx, id, attempt, true, err)
		default:
			// An unanswered attempt (only retry-safe operations have an
			// attempt timeout) or a transport error.
			mayHaveApplied = true
			if !retrySafe {
				return ports.Revisions{}, c.giveUp(ctx, id, attempt, true, err)
			}
		}
		c.opt.Logger.DebugContext(ctx, "lifecycle request not answered, retrying", "request_id", id, "attempt", attempt, "err", err)
		// Jitter keeps gateway replicas from retrying in lockstep
		// while a new leader takes over.
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(backoff*2, c.opt.MaxBackoff)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ports.Revisions{}, c.giveUp(ctx, id, attempt, mayHaveApplied, err)
		case <-t.C:
		}
	}
}

func (c *Client) giveUp(ctx context.Context, id string, attempts int, mayHaveApplied bool, last error) error {
	c.opt.Logger.WarnContext(ctx, "lifecycle request gave up", "request_id", id, "attempts", attempts, "outcome_unknown", mayHaveApplied, "err", last)
	if mayHaveApplied {
		return domain.Errorf(domain.CodeDeadlineExceeded, "lifecycle did not answer in time; the operation may still be applied (%d attempts)", attempts)
	}
	return domain.Errorf(domain.CodeUnavailable, "no lifecycle leader answered (%d attempts): %v", attempts, last)
}

func decodeReply(data []byte) (ports.Revisions, error) {
	var r lifecyclev1.Reply
	if err := proto.Unmarshal(data, &r); err != nil {
		return ports.Revisions{}, domain.Errorf(domain.CodeInternal, "decoding lifecycle reply: %v", err)
	}
	if e := r.GetError(); e != nil {
		code := domain.Code(e.GetCode())
		if code == domain.CodeOK || e.GetCode() < 0 || code > domain.CodeUnauthenticated {
			code = domain.CodeInternal
		}
		msg := e.GetMessage()
		if msg == "" {
			msg = fmt.Sprintf("lifecycle rejected the operation (%s)", code)
		}
		return ports.Revisions{}, &domain.Error{Code: code, Message: msg}
	}
	return ports.Revisions{Groups: r.GetGroupsRevision(), Instances: r.GetInstancesRevision()}, nil
}

// RetrySafe reports whether sending req twice has the effect of sending it
// once. Relative size changes are not (a duplicate would grow the group
// twice), nor are revision-checked writes (a duplicate would report a
// conflict for an operation that succeeded).
func RetrySafe(req *lifecyclev1.Request) bool {
	switch req.GetOp().(type) {
	case *lifecyclev1.Request_SetTargetSize, *lifecyclev1.Request_DeleteNodes, *lifecyclev1.Request_InstanceAction:
		return true
	}
	return false
}
