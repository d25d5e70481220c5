// Command hook-runner runs nodesmith's lifecycle hooks: it takes hook
// commands from NATS JetStream, runs their scripts on VMs over SSH and
// publishes the results. See the module README for flags and semantics.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nodesmith/nodesmith/libs/config"
	"github.com/nodesmith/nodesmith/libs/health"
	"github.com/nodesmith/nodesmith/libs/logging"
	"github.com/nodesmith/nodesmith/libs/tracing"
	"github.com/nodesmith/nodesmith/services/hook-runner/service"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := realMain(ctx)
	stop() // not deferred: os.Exit below would skip it
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "hook-runner:", err)
		os.Exit(1)
	}
}

func realMain(ctx context.Context) error {
	cfg := service.DefaultConfig()
	var logOpts logging.Options
	fs := flag.NewFlagSet("hook-runner", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	logOpts.RegisterFlags(fs)
	if err := config.Parse(fs, os.Args[1:], nil); err != nil {
		return err
	}
	cfg.ReadSecretEnv(os.LookupEnv)
	logOpts.Service = "hook-runner"
	log, err := logging.New(logOpts)
	if err != nil {
		return err
	}
	shutdownTracing, err := tracing.Setup(ctx, "hook-runner")
	if err != nil {
		return err
	}
	defer func() { _ = shutdownTracing(context.WithoutCancel(ctx)) }()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return service.Run(ctx, cfg, service.Deps{Logger: log, Registry: reg, Health: &health.Checks{}})
}
