package service

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/shapesrpc"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/app"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// serveShapes answers instance-shape questions (the gateway's and
// lifecycle's offering checks) once the catalog's credentials are known,
// like the consumer: an account whose credentials exist only there would
// otherwise be answered with an auth error.
func serveShapes(nc *nats.Conn, clouds map[string]ports.Cloud, synced <-chan struct{}, reg prometheus.Registerer, log *slog.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		return shapesrpc.Serve(ctx, nc, app.NewShapes(clouds, app.ShapeOptions{}), shapesrpc.Options{Logger: log, Registry: reg, Ready: synced})
	}
}
