// Package service is the hook runner's composition root: it wires the SSH
// executor, the JetStream consumer and result publisher, metrics and health
// checks, and runs them until its context ends. main, the embedded launcher
// and component tests all start the service through Run.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/libs/command"
	"github.com/nodesmith/nodesmith/libs/health"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/run"
	"github.com/nodesmith/nodesmith/libs/sealed"
	"github.com/nodesmith/nodesmith/libs/worker"
	hookjs "github.com/nodesmith/nodesmith/services/hook-runner/internal/adapters/jetstream"
	sshexec "github.com/nodesmith/nodesmith/services/hook-runner/internal/adapters/ssh"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/app"
)

// Deps are what a host process may inject. All are optional.
type Deps struct {
	Logger *slog.Logger
	// Registry receives the service's metrics; nil means a private one.
	Registry *prometheus.Registry
	// Health receives the readiness checks (NATS connected, consumer bound).
	Health *health.Checks
	// Conn is a ready NATS connection; nil means connect with Config.NATS.
	// An injected connection is not closed by Run.
	Conn *nats.Conn
}

// Run runs the hook runner until ctx ends, then stops taking hooks, lets
// running ones finish within cfg.ShutdownGrace (killing and redelivering
// the rest), drains NATS if it owns the connection, and returns nil. It
// returns an error if the service cannot start.
func Run(ctx context.Context, cfg Config, deps Deps) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	host := command.Host{Logger: deps.Logger, Registry: deps.Registry, Health: deps.Health}.WithDefaults()
	log, reg, checks := host.Logger, host.Registry, host.Health
	runnerID := cfg.RunnerID
	if runnerID == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("runner id: no --runner-id and no host name: %w", err)
		}
		runnerID = h
	}

	// Credentials and known_hosts first: a broken Secret should fail the
	// pod at start, not every hook later.
	executor, err := sshexec.New(sshexec.Options{
		User:              cfg.SSH.User,
		KeyFile:           cfg.SSH.KeyFile,
		KeyPassphraseFile: cfg.SSH.KeyPassphraseFile,
		PasswordFile:      cfg.SSH.PasswordFile,
		PrivateKey:        []byte(cfg.SSH.PrivateKey),
		KeyPassphrase:     []byte(cfg.SSH.KeyPassphrase),
		Password:          []byte(cfg.SSH.Password),
		KnownHostsFiles:   cfg.SSH.KnownHostsFiles,
		TrustOnFirstUse:   cfg.SSH.TrustOnFirstUse,
		DefaultPort:       cfg.SSH.Port,
		ConnectTimeout:    cfg.SSH.ConnectTimeout,
		Logger:            log,
	})
	if err != nil {
		return fmt.Errorf("ssh: %w", err)
	}

	var openEnv func(map[string]string) (map[string]string, error)
	if cfg.SecretsKeyFile != "" {
		key, err := sealed.LoadKeyFile(cfg.SecretsKeyFile)
		if err != nil {
			return err
		}
		openEnv = func(env map[string]string) (map[string]string, error) {
			return key.OpenMap(sealed.PurposeHookEnv, env)
		}
	} else {
		log.Warn("no --secrets-key-file: hooks whose environment holds sealed values will fail")
	}

	nc, js, closeNATS, err := messaging.Connect(ctx, deps.Conn, cfg.NATS, cfg.Topology, "hook-runner", log)
	if err != nil {
		return startErr(ctx, err)
	}
	defer closeNATS()
	cons, err := js.Consumer(ctx, messaging.CommandStream, messaging.ConsumerHookRunner)
	if err != nil {
		return startErr(ctx, fmt.Errorf("binding consumer %s: %w", messaging.ConsumerHookRunner, err))
	}
	hb := heartbeat(cons.CachedInfo().Config)
	defer messaging.RegisterConsumerCollector(reg, js, messaging.CommandStream, messaging.ConsumerHookRunner)()
	checks.Add("hook-runner-nats", func(context.Context) error {
		if s := nc.Status(); s != nats.CONNECTED {
			return fmt.Errorf("nats connection is %s", s)
		}
		return nil
	})
	checks.Add("hook-runner-consumer", func(ctx context.Context) error {
		if _, err := cons.Info(ctx); err != nil {
			return fmt.Errorf("consumer %s: %w", messaging.ConsumerHookRunner, err)
		}
		return nil
	})

	runner := app.NewRunner(executor, hookjs.NewResultPublisher(js), app.Options{
		RunnerID:       runnerID,
		DefaultTimeout: cfg.HookTimeout,
		Logger:         log,
		Metrics:        app.NewMetrics(reg),
		OpenEnv:        openEnv,
	})

	g, _ := run.NewGroup(ctx)
	g.Go("hook consumer", func(ctx context.Context) error {
		return worker.Run(ctx, cons, worker.Options{
			Name:          messaging.ConsumerHookRunner,
			Concurrency:   cfg.Concurrency,
			Heartbeat:     hb,
			ShutdownGrace: cfg.ShutdownGrace,
			Logger:        log,
			Metrics:       worker.NewMetrics(reg),
		}, hookjs.Handler(runner))
	})
	if cfg.HealthAddr != "" {
		l, err := run.Listen(cfg.HealthAddr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: health.Handler(checks, reg), ReadHeaderTimeout: 5 * time.Second}
		g.Go("health server", run.HTTP(srv, l, 5*time.Second))
	}
	log.Info("hook runner started", "runner", runnerID, "concurrency", cfg.Concurrency,
		"known_hosts_files", len(cfg.SSH.KnownHostsFiles), "trust_on_first_use", cfg.SSH.TrustOnFirstUse,
		"ssh_user", cfg.SSH.User, "health_addr", cfg.HealthAddr, "heartbeat", hb)
	err = g.Wait()
	log.Info("hook runner stopped")
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// startErr reports a start-up failure, unless it only happened because the
// service was told to stop while starting: that is a clean stop.
func startErr(ctx context.Context, err error) error {
	select {
	case <-ctx.Done():
		return nil
	default:
		return err
	}
}

// heartbeat is how often a running hook is marked in progress: a third of
// the shortest time the server waits for an ack, so a missed beat or two
// never lets a hook be redelivered mid-script. That time is the consumer's
// AckWait, except that JetStream applies BackOff[n] as the ack deadline of
// delivery n+1 when the consumer has a BackOff list, and the first entry
// can be much shorter than AckWait.
func heartbeat(c jetstream.ConsumerConfig) time.Duration {
	deadline := c.AckWait
	for _, b := range c.BackOff {
		if b > 0 && (deadline <= 0 || b < deadline) {
			deadline = b
		}
	}
	if deadline <= 0 {
		deadline = 30 * time.Second // the server's default AckWait
	}
	return min(max(deadline/3, 100*time.Millisecond), 10*time.Second)
}
