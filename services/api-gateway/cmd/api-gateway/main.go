// Command api-gateway serves Cluster Autoscaler's externalgrpc
// CloudProvider API and the REST admin API from an in-memory view of
// nodesmith's state. See the module README for flags and security.
package main

import (
	"context"
	"flag"
	"os"

	"github.com/nodesmith/nodesmith/libs/command"
	"github.com/nodesmith/nodesmith/services/api-gateway/service"
)

func main() {
	cfg := service.DefaultConfig()
	command.Main("api-gateway", func(fs *flag.FlagSet) { cfg.RegisterFlags(fs) }, func(ctx context.Context, h command.Host) error {
		// Tokens come from the environment too (files are flags).
		cfg.LoadEnv(os.LookupEnv)
		return service.Run(ctx, cfg, service.Deps{Logger: h.Logger, Registry: h.Registry, Health: h.Health})
	})
}
