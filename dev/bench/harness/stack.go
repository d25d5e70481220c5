package harness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/dev/embedded"
	"github.com/nodesmith/nodesmith/libs/health"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	gateway "github.com/nodesmith/nodesmith/services/api-gateway/service"
	cloudadapter "github.com/nodesmith/nodesmith/services/cloud-adapter/service"
	hookrunner "github.com/nodesmith/nodesmith/services/hook-runner/service"
	lifecycle "github.com/nodesmith/nodesmith/services/lifecycle/service"
)

// StackConfig selects and tunes the in-process services. Each service
// gets its own NATS connection, registry and readiness checks, as it
// would in its own pod.
type StackConfig struct {
	// Groups is lifecycle's configuration file content (ConfigYAML).
	Groups []byte
	// Replicas per service; 0 means 1, negative means not started.
	Lifecycle, CloudAdapters, HookRunners, Gateways int
	// Tune* adjust each service's configuration after the harness set
	// the world's addresses.
	TuneLifecycle    func(*lifecycle.Config)
	TuneCloudAdapter func(*cloudadapter.Config)
	TuneHookRunner   func(*hookrunner.Config)
	TuneGateway      func(*gateway.Config)
	// Logger receives the services' logs; nil discards them.
	Logger *slog.Logger
}

// Stack is a set of running in-process services.
type Stack struct {
	// GRPCAddr is the first gateway's externalgrpc address.
	GRPCAddr string
	// Registries holds each replica's metrics registry by name
	// ("lifecycle", "hook-runner-0", ...).
	Registries map[string]*prometheus.Registry
	checks     map[string]*health.Checks
	procs      []*Proc
}

// Proc is one in-process service replica.
type Proc struct {
	Name   string
	cancel context.CancelFunc
	done   chan error
}

// Go runs f until Stop.
func Go(ctx context.Context, name string, f func(ctx context.Context) error) *Proc {
	ctx, cancel := context.WithCancel(ctx)
	p := &Proc{Name: name, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- f(ctx) }()
	return p
}

// Stop cancels the replica and waits for Run to return.
func (p *Proc) Stop() error {
	p.cancel()
	if err := <-p.done; err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	return nil
}

func replicas(n int) int {
	if n == 0 {
		return 1
	}
	return max(n, 0)
}

// StartStack starts the services against w and returns once every one is
// ready (the gateway's read model loaded, every consumer bound).
func StartStack(ctx context.Context, w *World, cfg StackConfig) (_ *Stack, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Stack{Registries: map[string]*prometheus.Registry{}, checks: map[string]*health.Checks{}}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	add := func(name string) (*slog.Logger, *prometheus.Registry, *health.Checks) {
		reg, checks := prometheus.NewRegistry(), &health.Checks{}
		s.Registries[name], s.checks[name] = reg, checks
		return log.With("service", name), reg, checks
	}
	name := func(base string, i, n int) string {
		if n == 1 {
			return base
		}
		return fmt.Sprintf("%s-%d", base, i)
	}
	errc := make(chan error, 1)
	watch := func(p *Proc) {
		s.procs = append(s.procs, p)
		go func() {
			select {
			case err := <-p.done:
				p.done <- err // for Stop
				if err != nil {
					select {
					case errc <- fmt.Errorf("%s: %w", p.Name, err):
					default:
					}
				}
			case <-ctx.Done():
			}
		}()
	}

	if n := replicas(cfg.Lifecycle); n > 0 {
		lc := lifecycle.DefaultConfig()
		lc.NATS = w.NATSOptions(natsauth.Lifecycle, "lifecycle")
		lc.HealthAddr = ""
		lc.ConfigData = cfg.Groups
		lc.SecretsKeyFile = w.SecretsKeyFile
		if cfg.TuneLifecycle != nil {
			cfg.TuneLifecycle(&lc)
		}
		var cluster lifecycle.Cluster
		if w.Cluster != nil {
			cluster = embedded.SimCluster{C: w.Cluster}
		} else {
			lc.Cluster = lifecycle.ClusterNone
		}
		l, reg, checks := add("lifecycle")
		watch(Go(ctx, "lifecycle", func(ctx context.Context) error {
			return lifecycle.Run(ctx, lc, lifecycle.Deps{Logger: l, Registry: reg, Health: checks, Cluster: cluster})
		}))
	}
	for i, n := 0, replicas(cfg.CloudAdapters); i < n; i++ {
		ca := cloudadapter.DefaultConfig()
		ca.NATS = w.NATSOptions(natsauth.CloudAdapter, name("cloud-adapter", i, n))
		ca.HealthAddr = ""
		ca.TencentEndpoint, ca.TencentScheme = w.Emulator.Endpoint(), "http"
		ca.CredentialsDir = w.CredentialsDir
		ca.WatchPollInterval = time.Second
		if cfg.TuneCloudAdapter != nil {
			cfg.TuneCloudAdapter(&ca)
		}
		l, reg, checks := add(ca.NATS.Name)
		watch(Go(ctx, ca.NATS.Name, func(ctx context.Context) error {
			return cloudadapter.Run(ctx, ca, cloudadapter.Deps{Logger: l, Registry: reg, Health: checks, Environ: []string{}})
		}))
	}
	for i, n := 0, replicas(cfg.HookRunners); i < n; i++ {
		hr := HookRunnerConfig(w)
		hr.NATS.Name = name("hook-runner", i, n)
		hr.RunnerID = hr.NATS.Name
		if cfg.TuneHookRunner != nil {
			cfg.TuneHookRunner(&hr)
		}
		l, reg, checks := add(hr.NATS.Name)
		watch(Go(ctx, hr.NATS.Name, func(ctx context.Context) error {
			return hookrunner.Run(ctx, hr, hookrunner.Deps{Logger: l, Registry: reg, Health: checks})
		}))
	}
	ready := make(chan string, 8)
	for i, n := 0, replicas(cfg.Gateways); i < n; i++ {
		gw := gateway.DefaultConfig()
		gw.NATS = w.NATSOptions(natsauth.APIGateway, name("api-gateway", i, n))
		gw.HealthAddr, gw.RESTAddr, gw.GRPCAddr = "", "", "127.0.0.1:0"
		gw.GRPCInsecure = true // loopback only
		if cfg.TuneGateway != nil {
			cfg.TuneGateway(&gw)
		}
		l, reg, checks := add(gw.NATS.Name)
		watch(Go(ctx, gw.NATS.Name, func(ctx context.Context) error {
			return gateway.Run(ctx, gw, gateway.Deps{Logger: l, Registry: reg, Health: checks, OnReady: func(a gateway.Addrs) { ready <- a.GRPC }})
		}))
	}
	if replicas(cfg.Gateways) > 0 {
		select {
		case s.GRPCAddr = <-ready:
		case err := <-errc:
			return nil, err
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Minute):
			return nil, errors.New("api-gateway not ready after 5m")
		}
	}
	if err := s.WaitReady(ctx, 2*time.Minute); err != nil {
		select {
		case rerr := <-errc:
			return nil, fmt.Errorf("%w (%w)", err, rerr)
		default:
		}
		return nil, err
	}
	return s, nil
}

// HookRunnerConfig is a hook-runner configuration that reaches w's VMs.
func HookRunnerConfig(w *World) hookrunner.Config {
	hr := hookrunner.DefaultConfig()
	hr.NATS = w.NATSOptions(natsauth.HookRunner, "hook-runner")
	hr.HealthAddr = ""
	hr.SSH.KeyFile = w.ClientKeyFile
	hr.SSH.KnownHostsFiles = []string{w.KnownHosts}
	hr.SSH.Port = w.SSHPort
	hr.SecretsKeyFile = w.SecretsKeyFile
	return hr
}

// WaitReady polls every service's readiness checks.
func (s *Stack) WaitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var failing []string
		for name, c := range s.checks {
			for check, msg := range c.Run(ctx) {
				failing = append(failing, name+"/"+check+": "+msg)
			}
		}
		if len(failing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			sort.Strings(failing)
			return fmt.Errorf("services not ready after %s: %s", timeout, strings.Join(failing, "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops every replica, last started first.
func (s *Stack) Stop() error {
	var errs []error
	for i := len(s.procs) - 1; i >= 0; i-- {
		errs = append(errs, s.procs[i].Stop())
	}
	s.procs = nil
	return errors.Join(errs...)
}
