// Package command is the shared main() of nodesmith's service binaries:
// SIGINT/SIGTERM cancel the context, flags are parsed with their
// NODESMITH_* environment fallbacks, logging and tracing are set up, the
// process gets a metrics registry with the Go and process collectors, and a
// returned error exits 1. Each cmd/<name>/main.go is then wiring only.
//
// --pprof-addr (off by default) serves net/http/pprof's profiles on an
// address of their own, for an operator investigating memory or CPU.
package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nodesmith/nodesmith/libs/config"
	"github.com/nodesmith/nodesmith/libs/health"
	"github.com/nodesmith/nodesmith/libs/logging"
	"github.com/nodesmith/nodesmith/libs/run"
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

// UnknownEnvMessage is the start-up warning listing the NODESMITH_*
// environment variables that set no flag of the service (tests of the
// deployment manifests look for it).
const UnknownEnvMessage = "ignoring unknown NODESMITH_* environment variables: they set no flag of this service (misspelt?)"

// logOutput is where the logs go; nil: stderr. Tests capture them.
var logOutput io.Writer

// pprofGrace bounds the graceful shutdown of the profiling server: a
// profile being taken when the service stops is cut after it.
const pprofGrace = 5 * time.Second

func realMain(ctx context.Context, name string, args []string, register func(fs *flag.FlagSet), runService func(ctx context.Context, h Host) error) error {
	logOpts := logging.Options{Service: name, Writer: logOutput}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	register(fs)
	logOpts.RegisterFlags(fs)
	pprofAddr := fs.String("pprof-addr", "", "serve net/http/pprof's profiles (/debug/pprof/) on this address; empty: off. They expose the process's internals: bind it to loopback or a private address")
	if err := config.Parse(fs, args, nil); err != nil {
		return err
	}
	log, err := logging.New(logOpts)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	// A NODESMITH_* variable that sets no flag is a misspelt name (or
	// one meant for another service): say so at start, or it would be
	// ignored silently and the default used.
	if unknown := config.UnknownEnv(fs, os.Environ()); len(unknown) > 0 {
		log.Warn(UnknownEnvMessage, "vars", unknown)
	}
	shutdownTracing, err := tracing.Setup(ctx, name)
	if err != nil {
		return err
	}
	defer func() {
		if err := shutdownTracing(context.WithoutCancel(ctx)); err != nil {
			log.Warn("flushing traces", "err", err)
		}
	}()
	if *pprofAddr != "" {
		stopPprof, err := servePprof(ctx, log, *pprofAddr)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return runService(ctx, Host{Logger: log, Registry: reg, Health: &health.Checks{}})
}

// servePprof serves the pprof handlers on addr with a server and mux of
// their own (never the default mux, never the metrics and health port). The
// listener is open when it returns; the returned stop shuts the server down
// gracefully and waits for it.
func servePprof(ctx context.Context, log *slog.Logger, addr string) (stop func(), err error) {
	l, err := run.Listen(addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Warn("serving pprof profiles: they expose the process's internals, keep this address private", "addr", l.Addr().String())
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run.HTTP(srv, l, pprofGrace)(sctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			log.Warn("pprof server", "err", err)
		}
	}, nil
}
