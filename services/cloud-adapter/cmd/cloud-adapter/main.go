// Command cloud-adapter turns nodesmith's cloud commands into cloud API
// calls (Tencent Cloud CVM) and publishes the results as events. Run it
// with several replicas: they share one durable JetStream consumer.
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
	"github.com/nodesmith/nodesmith/services/cloud-adapter/service"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := realMain(ctx)
	stop() // not deferred: os.Exit below would skip it
	if err != nil {
		fmt.Fprintln(os.Stderr, "cloud-adapter:", err)
		os.Exit(1)
	}
}

func realMain(ctx context.Context) error {
	fs := flag.NewFlagSet(service.Name, flag.ContinueOnError)
	cfg := service.DefaultConfig()
	cfg.RegisterFlags(fs)
	logOpts := logging.Options{Service: service.Name}
	logOpts.RegisterFlags(fs)
	if err := config.Parse(fs, os.Args[1:], nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	log, err := logging.New(logOpts)
	if err != nil {
		return err
	}
	shutdownTracing, err := tracing.Setup(ctx, service.Name)
	if err != nil {
		return err
	}
	defer func() { _ = shutdownTracing(context.WithoutCancel(ctx)) }()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return service.Run(ctx, cfg, service.Deps{Logger: log, Registry: reg, Health: &health.Checks{}})
}
