// Package service is the composition root of the lifecycle service: the
// instance state machine and the only writer of nodesmith's state. It is
// used by cmd/lifecycle, by the embedded launcher (dev/) and by component
// tests, which call Run with injected dependencies.
package service

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/libs/cloudshapes"
	"github.com/nodesmith/nodesmith/libs/cloudshapes/natsask"
	"github.com/nodesmith/nodesmith/libs/command"
	"github.com/nodesmith/nodesmith/libs/health"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/run"
	"github.com/nodesmith/nodesmith/libs/sealed"
	"github.com/nodesmith/nodesmith/libs/worker"
	jsadapter "github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/jetstream"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/natskv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/oteltrace"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/prom"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/yamlconfig"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// Cluster is the Kubernetes cluster the instances join (see ports.Cluster
// for the contract). The embedded launcher adapts a simulated cluster to it;
// production uses a client-go informer adapter.
type Cluster = ports.Cluster

// Node is what lifecycle needs to know about a Kubernetes Node.
type Node = ports.Node

// NodeEvent is one change to a Node.
type NodeEvent = ports.NodeEvent

// NodeEventType says what happened to a Node.
type NodeEventType = ports.NodeEventType

// Taint is a Kubernetes node taint.
type Taint = ports.Taint

// Node event types.
const (
	NodeAdded   = ports.NodeAdded
	NodeUpdated = ports.NodeUpdated
	NodeDeleted = ports.NodeDeleted
	// NodesSynced follows the initial list of a watch (see ports.Cluster).
	NodesSynced = ports.NodesSynced
)

// Leader elects the replica that writes state (see ports.Leader).
type Leader = ports.Leader

// Clock tells the time (see ports.Clock).
type Clock = ports.Clock

// Deps are what a host may inject. Every field is optional.
type Deps struct {
	Logger *slog.Logger
	// Registry receives the service's metrics.
	Registry *prometheus.Registry
	// Health receives the readiness checks.
	Health *health.Checks
	// Conn is a ready NATS connection; when nil, Run connects with
	// Config.NATS and drains the connection at shutdown.
	Conn *nats.Conn
	// Cluster is the node watcher; it overrides Config.Cluster. When nil,
	// Config.Cluster decides: a client-go informer, or "no cluster" mode
	// (--cluster=none): an instance is Running as soon as its
	// after_created hook succeeded (logged at start); nodes are neither
	// checked nor labelled nor deleted.
	Cluster Cluster
	// Leader overrides leader election. When nil: a Lease with a
	// Kubernetes client and Config.LeaderElect, else always-leader (a
	// single replica).
	Leader Leader
	// Clock defaults to the system clock.
	Clock Clock
}

// Run runs the service until ctx ends, then shuts down gracefully and
// returns nil. It returns an error if it cannot start (invalid config or
// configuration file, NATS or JetStream unusable).
func Run(ctx context.Context, cfg Config, deps Deps) error {
	err := runService(ctx, cfg, deps)
	select {
	case <-ctx.Done():
		// Stopped (possibly while starting): a shutdown, not a failure.
		return nil
	default:
		return err
	}
}

func runService(ctx context.Context, cfg Config, deps Deps) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	host := command.Host{Logger: deps.Logger, Registry: deps.Registry, Health: deps.Health}.WithDefaults()
	log, reg, checks := host.Logger, host.Registry, host.Health
	fileCfg, fileData, err := cfg.loadGroups()
	if err != nil {
		return err
	}
	if fileCfg != nil {
		for _, w := range fileCfg.Warnings {
			log.Warn(w)
		}
	} else {
		log.Info("no configuration file: node groups come from the admin API only")
	}

	var sealer app.Sealer
	if cfg.SecretsKeyFile == "" && fileCfg != nil && holdsSecrets(fileCfg) {
		return errors.New("the configuration file holds hook env values or secretParameters, which are stored and sent only sealed: set --secrets-key-file (" + sealed.GenerateHint + ")")
	}
	if cfg.SecretsKeyFile != "" {
		key, err := sealed.LoadKeyFile(cfg.SecretsKeyFile)
		if err != nil {
			return err
		}
		sealer = key
		log.Info("sealing key ring loaded", "key_ids", key.IDs())
	}

	nc, js, closeNATS, err := messaging.Connect(ctx, deps.Conn, cfg.NATS, cfg.Topology, "lifecycle", log)
	if err != nil {
		return err
	}
	defer closeNATS()
	store, err := natskv.Open(ctx, js)
	if err != nil {
		return err
	}

	metrics := prom.New(reg)
	svcMetrics := prom.NewServiceMetrics(reg)
	ext, err := clusterAdapters(ctx, cfg, deps, log, checks, svcMetrics)
	if err != nil {
		return err
	}
	defer ext.stop()
	cfg.ClusterID = ext.clusterID
	a := app.New(cfg.appOptions(), app.Deps{
		Store:    store,
		Catalog:  store,
		Commands: jsadapter.NewCommands(jsadapter.MessagingPublisher{P: messaging.NewPublisher(js)}),
		Cluster:  ext.cluster,
		Clock:    deps.Clock,
		Logger:   log,
		Observer: metrics,
		Notifier: ext.notifier,
		Status:   ext.status,
		Tracer:   oteltrace.Tracer{},
		Sealer:   sealer,
	})
	gauges := prom.NewCollector(a.Stats)
	if err := reg.Register(gauges); err != nil {
		return fmt.Errorf("registering lifecycle gauges: %w", err)
	}
	defer reg.Unregister(gauges)
	orphanGauges := prom.NewOrphanCollector(a.HeldOrphans)
	if err := reg.Register(orphanGauges); err != nil {
		return fmt.Errorf("registering lifecycle orphan gauges: %w", err)
	}
	defer reg.Unregister(orphanGauges)
	workerMetrics := worker.NewMetrics(reg)
	defer messaging.RegisterConsumerCollector(reg, js, messaging.EventStream, messaging.ConsumerLifecycle)()
	// Lifecycle is the command stream's only publisher: its fill against
	// --js-command-max-msgs/-bytes (NodesmithCommandStreamNearLimit).
	defer messaging.RegisterStreamCollector(reg, js, messaging.CommandStream)()
	shapes := natsask.New(nc)
	if fileCfg != nil {
		if err := checkOfferingShapes(ctx, fileCfg, shapes, log); err != nil {
			return err
		}
		a.SetConfigCatalog(fileCfg.Catalog)
		if err := a.SetConfig(ctx, fileCfg.Groups); err != nil {
			return err
		}
	}

	checks.Add("lifecycle-nats", func(context.Context) error {
		if s := nc.Status(); s != nats.CONNECTED {
			return fmt.Errorf("nats connection is %s", s)
		}
		return nil
	})
	checks.Add("lifecycle-store", store.Ping)
	// The event consumer is bound only while leading, but it must exist
	// (and the stream answer) on every replica for a takeover to work.
	checks.Add("lifecycle-consumer", func(ctx context.Context) error {
		if _, err := js.Consumer(ctx, messaging.EventStream, messaging.ConsumerLifecycle); err != nil {
			return fmt.Errorf("consumer %s: %w", messaging.ConsumerLifecycle, err)
		}
		return nil
	})

	// Everything that writes state or answers operations runs only while
	// leading: a follower neither dispatches nor subscribes to operations,
	// and a new term loads the state from KV (a warm standby only what
	// changed since it last looked: RunStandby).
	lead := func(ctx context.Context) error {
		log.Info("leading: loading state")
		svcMetrics.SetLeading(true)
		defer svcMetrics.SetLeading(false)
		if err := a.Start(ctx); err != nil {
			return err
		}
		defer a.Stop()
		g, _ := run.NewGroup(ctx)
		g.Go("dispatcher", a.RunDispatcher)
		g.Go("node watcher", a.RunNodeWatcher)
		g.Go("reconciler", a.RunReconciler)
		g.Go("status", a.RunStatusReporter)
		g.Go("catalog", a.RunCatalogConverger)
		g.Go("ops", func(ctx context.Context) error {
			return jsadapter.ServeOps(ctx, nc, a, cfg.OpTimeout, log)
		})
		g.Go("events", func(ctx context.Context) error {
			cons, err := messaging.BindConsumer(ctx, js, messaging.EventStream, messaging.ConsumerLifecycle, log)
			if err != nil {
				return err
			}
			return worker.Run(ctx, cons, worker.Options{
				Name:          messaging.ConsumerLifecycle,
				Concurrency:   cfg.EventConcurrency,
				ShutdownGrace: cfg.ShutdownGrace,
				Logger:        log,
				Metrics:       workerMetrics,
			}, jsadapter.EventHandler(a))
		})
		return g.Wait()
	}

	g, _ := run.NewGroup(ctx)
	if cfg.HealthAddr != "" {
		l, err := run.Listen(cfg.HealthAddr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: health.Handler(checks, reg), ReadHeaderTimeout: 5 * time.Second}
		g.Go("health server", run.HTTP(srv, l, 5*time.Second))
	}
	g.Go("leader", func(ctx context.Context) error { return ext.leader.Run(ctx, lead) })
	// While not leading, the replica keeps the instance records current,
	// so that a promotion reads only what changed.
	g.Go("standby", a.RunStandby)
	if cfg.ConfigData == nil && cfg.ConfigFile != "" && cfg.ConfigReloadInterval > 0 {
		g.Go("config reload", func(ctx context.Context) error {
			return watchConfig(ctx, cfg.ConfigFile, fileData, cfg.ConfigReloadInterval, a, shapes, log)
		})
	}
	log.Info("lifecycle started", "cluster_id", cfg.ClusterID, "config_file", cfg.ConfigFile, "no_cluster", ext.cluster == nil)
	err = g.Wait()
	log.Info("lifecycle stopped")
	return err
}

// watchConfig re-reads the file every interval and applies it when its
// content changed. Reading by path follows the ConfigMap symlink swap; an
// invalid file is logged and the previous configuration stays in force.
func watchConfig(ctx context.Context, path string, applied []byte, every time.Duration, a *app.App, shapes cloudshapes.Ask, log *slog.Logger) error {
	lastSum := sha256.Sum256(applied)
	return run.Every(ctx, every, func(ctx context.Context) {
		data, err := os.ReadFile(path)
		if err != nil {
			log.Warn("reading the configuration file for reload", "path", path, "err", err)
			return
		}
		sum := sha256.Sum256(data)
		if bytes.Equal(sum[:], lastSum[:]) {
			return
		}
		lastSum = sum
		cfg, err := yamlconfig.Parse(path, data, filepath.Dir(path))
		if err == nil {
			err = checkOfferingShapes(ctx, cfg, shapes, log)
		}
		if err != nil {
			log.Error("configuration file changed but is invalid; keeping the previous configuration", "err", err)
			return
		}
		for _, w := range cfg.Warnings {
			log.Warn(w)
		}
		log.Info("configuration file changed; applying", "path", path, "groups", len(cfg.Groups))
		a.SetConfigCatalog(cfg.Catalog)
		if err := a.SetConfig(ctx, cfg.Groups); err != nil && !errors.Is(err, app.ErrNotLeader) {
			log.Error("applying the reloaded configuration", "err", err)
		}
	})
}

// holdsSecrets reports whether the file defines a value lifecycle must
// seal (a hook env value or a secret parameter).
func holdsSecrets(c *yamlconfig.Config) bool {
	tmpl := func(t domain.InstanceTemplate) bool { return len(t.HookEnv) > 0 || len(t.SecretParameters) > 0 }
	hook := func(h *domain.HookSpec) bool { return h != nil && len(h.Env) > 0 }
	for _, g := range c.Groups {
		if tmpl(g.Template) || hook(g.Hooks.AfterCreated) || hook(g.Hooks.BeforeDelete) {
			return true
		}
	}
	for _, e := range c.Catalog {
		if (e.Template != nil && tmpl(*e.Template)) || hook(e.Hook) {
			return true
		}
	}
	return false
}
