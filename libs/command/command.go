// Package command is the shared main() of nodesmith's service binaries:
// SIGINT/SIGTERM cancel the context, flags are parsed with their
// NODESMITH_* environment fallbacks, logging and tracing are set up, the
// process gets a metrics registry with the Go and process collectors, and a
// returned error exits 1. Each cmd/<name>/main.go is then wiring only.
package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nodesmith/nodesmith/libs/config"
	"github.com/nodesmith/nodesmith/libs/health"
	"github.com/nodesmith/nodesmith/libs/logging"
	"github.com/nodesmith/nodesmith/libs/tracing"
)

// Host is what a binary hands its service.
type Host struct {
	Logger   *slog.Logger
	Registry *prometheus.Registry
	Health   *health.Checks
}

// WithDefaults fills what a host left out, as a service's Run does with
// its Deps: the default logger, a fresh registry (metrics then go nowhere
// unless something serves it) and an empty set of readiness checks.
func (h Host) WithDefaults() Host {
	if h.Logger == nil {
		h.Logger = slog.Default()
	}
	if h.Registry == nil {
		h.Registry = prometheus.NewRegistry()
	}
	if h.Health == nil {
		h.Health = &health.Checks{}
	}
	return h
}

// Main runs the binary name: register binds the service's flags, run runs
// it until ctx ends. It never returns.
func Main(name string, register func(fs *flag.FlagSet), run func(ctx context.Context, h Host) error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := realMain(ctx, name, os.Args[1:], register, run)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

func realMain(ctx context.Context, name string, args []string, register func(fs *flag.FlagSet), run func(ctx context.Context, h Host) error) error {
	logOpts := logging.Options{Service: name}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	register(fs)
	logOpts.RegisterFlags(fs)
	if err := config.Parse(fs, args, nil); err != nil {
		return err
	}
	log, err := logging.New(logOpts)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	shutdownTracing, err := tracing.Setup(ctx, name)
	if err != nil {
		return err
	}
	defer func() {
		if err := shutdownTracing(context.WithoutCancel(ctx)); err != nil {
			log.Warn("flushing traces", "err", err)
		}
	}()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return run(ctx, Host{Logger: log, Registry: reg, Health: &health.Checks{}})
}
