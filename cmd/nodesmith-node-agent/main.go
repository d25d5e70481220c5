// Command nodesmith-node-agent runs on every spot Node (a DaemonSet): it
// polls the VM's instance metadata for a spot reclaim notice and, on one,
// taints and annotates its Node so lifecycle drains and replaces it before
// the cloud takes the VM. See the module README for flags.
package main

import (
	"context"
	"flag"

	"github.com/nodesmith/nodesmith/cmd/nodesmith-node-agent/agent"
	"github.com/nodesmith/nodesmith/libs/command"
)

func main() {
	cfg := agent.DefaultConfig()
	command.Main("nodesmith-node-agent", func(fs *flag.FlagSet) { cfg.RegisterFlags(fs) }, func(ctx context.Context, h command.Host) error {
		return agent.Run(ctx, cfg, agent.Deps{Host: h})
	})
}
