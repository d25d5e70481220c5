package messaging

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/natsconn"
)

// Connect gives service name (a Service* constant) its NATS connection and
// JetStream, with the topology in place: lifecycle, the bootstrap
// identity, ensures it (Ensure); every other service is not allowed to and
// waits until the consumers and buckets it uses exist (WaitTopology).
// conn, when non-nil, is the host's (a test's): it is used as is and the
// host closes it. Otherwise a connection is made from opts, named name
// unless opts names it, with name's inbox prefix unless opts sets one,
// logging to log; the returned close drains it (call it once the service
// has stopped using it). Connecting, ensuring and waiting all retry while
// NATS or JetStream is unavailable, until ctx ends.
func Connect(ctx context.Context, conn *nats.Conn, opts natsconn.Options, topo Options, name string, log *slog.Logger) (nc *nats.Conn, js jetstream.JetStream, closeConn func(), err error) {
	needs, ok := NeedsOf(name)
	if !ok {
		return nil, nil, nil, fmt.Errorf("unknown service %q", name)
	}
	nc, closeConn = conn, func() {}
	if nc == nil {
		if opts.Name == "" {
			opts.Name = name
		}
		if opts.InboxPrefix == "" {
			opts.InboxPrefix = InboxPrefix(name)
		}
		opts.Logger = log
		if nc, err = natsconn.Connect(ctx, opts); err != nil {
			return nil, nil, nil, err
		}
		closeConn = func() { natsconn.Drain(nc) }
	}
	if js, err = jetstream.New(nc); err != nil {
		closeConn()
		return nil, nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	if name != ServiceLifecycle {
		if err := WaitTopology(ctx, js, needs, log); err != nil {
			closeConn()
			return nil, nil, nil, err
		}
		return nc, js, closeConn, nil
	}
	if err := Ensure(ctx, js, topo); err != nil {
		closeConn()
		return nil, nil, nil, fmt.Errorf("ensuring the JetStream topology: %w", err)
	}
	return nc, js, closeConn, nil
}
