// Command api-gateway serves Cluster Autoscaler's externalgrpc
// CloudProvider API and the REST admin API from an in-memory view of
// nodesmith's state. See the module README for flags and security.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nodesmith/nodesmith/libs/config"
	"github.com/nodesmith/nodesmith/libs/health"
	"github.com/nodesmith/nodesmith/libs/logging"
	"github.com/nodesmith/nodesmith/libs/tracing"

	"github.com/nodesmith/nodesmith/services/api-gateway/service"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := realMain(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "api-gateway:", err)
		os.Exit(1)
	}
}

func realMain(ctx context.Context) error {
	cfg := service.DefaultConfig()
	var logOpts logging.Options
	fs := flag.NewFlagSet("api-gateway", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	logOpts.RegisterFlags(fs)
	if err := config.Parse(fs, os.Args[1:], nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	cfg.LoadEnv(os.LookupEnv)
	logOpts.Service = "api-gateway"
	log, err := logging.New(logOpts)
	if err != nil {
		return err
	}
	shutdownTracing, err := tracing.Setup(ctx, "api-gateway")
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(sctx)
	}()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return service.Run(ctx, cfg, service.Deps{Logger: log, Registry: reg, Health: &health.Checks{}})
}
