// Package service is the cloud adapter's composition root: it connects to
// NATS, ensures the JetStream topology, builds the cloud providers and the
// application, and consumes cloud commands until its context ends. The
// binary (cmd/cloud-adapter), the embedded launcher (dev/) and component
// tests all start the service through Run.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/libs/command"
	"github.com/nodesmith/nodesmith/libs/health"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/run"
	"github.com/nodesmith/nodesmith/libs/sealed"
	"github.com/nodesmith/nodesmith/libs/worker"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/jetstream"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/offerings"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/secrets"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/app"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/metrics"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// Name is the service's name in logs, metrics and NATS connection names.
const Name = "cloud-adapter"

// Deps is what a host may inject. Every field is optional.
type Deps struct {
	Logger *slog.Logger
	// Registry receives the service's metrics; nil means a private one.
	Registry *prometheus.Registry
	// Health receives the readiness checks (NATS connected, consumer bound).
	Health *health.Checks
	// Conn is a ready NATS connection owned by the host; nil means connect
	// with Config.NATS (and drain that connection at shutdown).
	Conn *nats.Conn
	// Clouds adds or replaces cloud adapters by provider name (tests in
	// this module use the fake).
	Clouds map[string]ports.Cloud
	// Environ is the environment read for NODESMITH_ACCOUNT_* credentials;
	// nil means os.Environ().
	Environ []string
}

// Run runs the cloud adapter until ctx ends, then stops taking commands,
// lets in-flight ones finish within Config.ShutdownGrace (long watches hand
// their command back at once) and returns nil. It returns an error when it
// cannot start.
func Run(ctx context.Context, cfg Config, deps Deps) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	host := command.Host{Logger: deps.Logger, Registry: deps.Registry, Health: deps.Health}.WithDefaults()
	log, reg, checks := host.Logger, host.Registry, host.Health
	environ := deps.Environ
	if environ == nil {
		environ = os.Environ()
	}
	m := metrics.New(reg)

	nc, js, closeNATS, err := messaging.Connect(ctx, deps.Conn, cfg.NATS, cfg.Topology, Name, log)
	if err != nil {
		return err
	}
	defer closeNATS()
	cons, err := messaging.BindConsumer(ctx, js, messaging.CommandStream, messaging.ConsumerCloudAdapter, log)
	if err != nil {
		return err
	}
	maxDeliver := cons.CachedInfo().Config.MaxDeliver
	if ackWait := cons.CachedInfo().Config.AckWait; ackWait != cfg.Topology.CloudAckWait {
		// Another service ensured the topology with other --js-* values
		// after ours: every service must be given the same ones.
		lvl := slog.LevelWarn
		if cfg.Heartbeat*minAckWaitPerHeartbeat > ackWait {
			lvl = slog.LevelError
		}
		log.Log(ctx, lvl, "the cloud consumer's ack wait is not --js-cloud-ack-wait: give every service the same --js-* flags",
			"consumer_ack_wait", ackWait, "js_cloud_ack_wait", cfg.Topology.CloudAckWait, "heartbeat", cfg.Heartbeat)
	}
	defer messaging.RegisterConsumerCollector(reg, js, messaging.CommandStream, messaging.ConsumerCloudAdapter)()

	creds, err := secrets.New(secrets.Options{
		Dir: cfg.CredentialsDir, File: cfg.CredentialsFile, Environ: environ, Logger: log, Metrics: m,
	})
	if err != nil {
		return fmt.Errorf("loading cloud credentials: %w", err)
	}
	var secretsKey *sealed.Key
	if cfg.SecretsKeyFile != "" {
		if secretsKey, err = sealed.LoadKeyFile(cfg.SecretsKeyFile); err != nil {
			return err
		}
	}
	catalogCreds := secrets.NewCatalogWatcher(creds, js, secretsKey)
	marks := offerings.New(js, log)
	clouds := map[string]ports.Cloud{}
	for name, build := range providers {
		c, err := build(providerEnv{cfg: cfg, creds: creds, metrics: m, log: log})
		if err != nil {
			return fmt.Errorf("building cloud provider %s: %w", name, err)
		}
		clouds[name] = c
	}
	maps.Copy(clouds, deps.Clouds)

	checks.Add(Name+"-nats", func(context.Context) error {
		if !nc.IsConnected() {
			return fmt.Errorf("nats %s", nc.Status())
		}
		return nil
	})
	checks.Add(Name+"-catalog", func(context.Context) error {
		select {
		case <-catalogCreds.Synced():
			return nil
		default:
			return errors.New("catalog credentials not loaded yet")
		}
	})
	checks.Add(Name+"-offerings", func(context.Context) error {
		select {
		case <-marks.Synced():
			return nil
		default:
			return errors.New("offering marks not loaded yet")
		}
	})
	checks.Add(Name+"-consumer", func(ctx context.Context) error {
		_, err := cons.Info(ctx)
		return err
	})

	var healthL net.Listener
	if cfg.HealthAddr != "" {
		if healthL, err = run.Listen(cfg.HealthAddr); err != nil {
			return err
		}
	}

	g, gctx := run.NewGroup(ctx)
	g.Go("catalog credentials", catalogCreds.Run)
	g.Go("offering marks", marks.Run)
	svc := app.New(clouds, jetstream.NewEvents(js, m), app.Options{
		PollInterval:     cfg.WatchPollInterval,
		FastPollInterval: cfg.WatchFastPollInterval,
		FastPollFor:      cfg.WatchFastPollFor,
		MaxWatch:         cfg.WatchMaxDuration,
		NotFoundGrace:    cfg.WatchNotFoundGrace,
		Stopping:         gctx.Done(),
		Logger:           log,
		OpenParameter:    openParameter(secretsKey),
		Marks:            marks,
		Metrics:          m,

		OfferingUnavailableTTL: cfg.OfferingUnavailableTTL,
	})
	g.Go("consumer", func(ctx context.Context) error {
		// Commands are taken only once the catalog's credentials are
		// known: an account whose credentials exist only there would
		// otherwise fail its first commands.
		// Likewise the offering marks: a replica that took creates
		// before knowing them would try sold-out offerings again.
		for _, synced := range []<-chan struct{}{catalogCreds.Synced(), marks.Synced()} {
			select {
			case <-synced:
			case <-ctx.Done():
				return nil
			}
		}
		return jetstream.Consume(ctx, cons, svc, worker.Options{
			Name:          messaging.ConsumerCloudAdapter,
			Concurrency:   cfg.Concurrency,
			Heartbeat:     cfg.Heartbeat,
			ShutdownGrace: cfg.ShutdownGrace,
			Logger:        log,
			Metrics:       worker.NewMetrics(reg),
		}, maxDeliver)
	})
	g.Go("credentials", func(ctx context.Context) error { return creds.Run(ctx, cfg.CredentialsReloadInterval) })
	if healthL != nil {
		srv := &http.Server{Handler: health.Handler(checks, reg), ReadHeaderTimeout: 5 * time.Second}
		g.Go("health", run.HTTP(srv, healthL, 5*time.Second))
	}
	log.Info("cloud adapter started", "providers", len(clouds), "concurrency", cfg.Concurrency, "max_deliver", maxDeliver,
		"ack_wait", cons.CachedInfo().Config.AckWait, "heartbeat", cfg.Heartbeat)
	err = g.Wait()
	log.Info("cloud adapter stopped")
	return err
}

// openParameter opens template secret parameters with the key ring; nil
// without one.
func openParameter(key *sealed.Key) func(name, token string) (string, error) {
	if key == nil {
		return nil
	}
	return func(name, token string) (string, error) {
		return key.OpenString(sealed.PurposeTemplateParameter, name, token)
	}
}
