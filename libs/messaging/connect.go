package messaging

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/natsconn"
)

// Connect gives a service its NATS connection and JetStream, with the
// topology ensured. conn, when non-nil, is the host's (the embedded
// launcher's services share one): it is used as is and the host closes it.
// Otherwise a connection is made from opts, named name unless opts names
// it, logging to log; the returned close drains it (call it once the
// service has stopped using it). Connecting and ensuring both retry while
// NATS or JetStream is unavailable, until ctx ends.
func Connect(ctx context.Context, conn *nats.Conn, opts natsconn.Options, topo Options, name string, log *slog.Logger) (nc *nats.Conn, js jetstream.JetStream, closeConn func(), err error) {
	nc, closeConn = conn, func() {}
	if nc == nil {
		if opts.Name == "" {
			opts.Name = name
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
	if err := Ensure(ctx, js, topo); err != nil {
		closeConn()
		return nil, nil, nil, fmt.Errorf("ensuring the JetStream topology: %w", err)
	}
	return nc, js, closeConn, nil
}
