// Command cloud-adapter turns nodesmith's cloud commands into cloud API
// calls (Tencent Cloud CVM) and publishes the results as events. Run it
// with several replicas: they share one durable JetStream consumer.
package main

import (
	"context"
	"flag"

	"github.com/nodesmith/nodesmith/libs/command"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/service"
)

func main() {
	cfg := service.DefaultConfig()
	command.Main(service.Name, func(fs *flag.FlagSet) { cfg.RegisterFlags(fs) }, func(ctx context.Context, h command.Host) error {
		return service.Run(ctx, cfg, service.Deps{Logger: h.Logger, Registry: h.Registry, Health: h.Health})
	})
}
