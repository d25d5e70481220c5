package messaging

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/tracing"
)

// Publisher publishes protobuf messages on JetStream with a message id for
// deduplication and the caller's trace context in the headers.
type Publisher struct {
	js jetstream.JetStream
}

// NewPublisher returns a Publisher on js.
func NewPublisher(js jetstream.JetStream) *Publisher { return &Publisher{js: js} }

// Publish sends msg on subject. msgID must be derived from what makes the
// message unique (for a command: instance or batch, and attempt), so a
// re-publish after a crash is dropped by the stream's duplicate window.
func (p *Publisher) Publish(ctx context.Context, subject, msgID string, msg proto.Message) (*jetstream.PubAck, error) {
	data, err := proto.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("encoding %T for %s: %w", msg, subject, err)
	}
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	tracing.Inject(ctx, m.Header)
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	ack, err := p.js.PublishMsg(ctx, m, opts...)
	if err != nil {
		return nil, fmt.Errorf("publishing %s (id %q): %w", subject, msgID, err)
	}
	return ack, nil
}

// jsErrCodeStreamStoreFailed is JetStream's error code for a message the
// stream refused to store (nats-server's JSStreamStoreFailedF).
const jsErrCodeStreamStoreFailed jetstream.ErrorCode = 10077

// IsStreamFull reports whether err is a publish refused because the stream
// reached its MaxMsgs or MaxBytes with DiscardNew: nothing was stored, and
// publishing again once workers have drained the stream succeeds.
func IsStreamFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jsErrCodeStreamStoreFailed {
		return false
	}
	return strings.Contains(apiErr.Description, "maximum messages exceeded") ||
		strings.Contains(apiErr.Description, "maximum bytes exceeded")
}
