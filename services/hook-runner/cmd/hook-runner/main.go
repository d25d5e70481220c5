// Command hook-runner runs nodesmith's lifecycle hooks: it takes hook
// commands from NATS JetStream, runs their scripts on VMs over SSH and
// publishes the results. See the module README for flags and semantics.
package main

import (
	"context"
	"flag"
	"os"

	"github.com/nodesmith/nodesmith/libs/command"
	"github.com/nodesmith/nodesmith/services/hook-runner/service"
)

func main() {
	cfg := service.DefaultConfig()
	command.Main("hook-runner", func(fs *flag.FlagSet) { cfg.RegisterFlags(fs) }, func(ctx context.Context, h command.Host) error {
		cfg.ReadSecretEnv(os.LookupEnv)
		return service.Run(ctx, cfg, service.Deps{Logger: h.Logger, Registry: h.Registry, Health: h.Health})
	})
}
