// Package service is the api-gateway's composition root: it wires the
// read model, the KV watcher, the lifecycle client, the externalgrpc gRPC
// server and the REST admin API, and runs them until its context ends.
// cmd/api-gateway, the embedded launcher and component tests all start the
// gateway through Run.
package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/nodesmith/nodesmith/libs/cloudshapes/natsask"
	"github.com/nodesmith/nodesmith/libs/command"
	"github.com/nodesmith/nodesmith/libs/health"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/run"
	"github.com/nodesmith/nodesmith/libs/sealed"
	"github.com/nodesmith/nodesmith/libs/tracing"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/grpcapi"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/metrics"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/natskv"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/natsreq"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/rest"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/tlsfiles"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
)

// Deps is what a host may inject.
type Deps struct {
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registry receives the gateway's metrics (a private one when nil).
	Registry *prometheus.Registry
	// Health receives the readiness checks (a private set when nil).
	Health *health.Checks
	// Conn is a ready NATS connection; when nil the gateway connects with
	// Config.NATS and drains the connection at shutdown. An injected
	// connection is left open.
	Conn *nats.Conn
	// TracerProvider creates the server spans of every gRPC call and REST
	// request and the client spans of lifecycle requests (whose context
	// travels to lifecycle in the NATS headers); nil means the global
	// provider (which cmd/api-gateway sets up from OTEL_* variables).
	TracerProvider trace.TracerProvider
	// OnReady, when set, is called once, after every listener accepts
	// connections and the read model has loaded the initial state, with
	// the bound addresses (useful with ":0" addresses in tests and the
	// embedded launcher).
	OnReady func(Addrs)
}

// Addrs are the bound listener addresses (host:port); empty when a
// listener is disabled.
type Addrs struct {
	GRPC, REST, Health string
}

// GRPCServiceName is the name the gRPC health service reports for CA's
// service.
var GRPCServiceName = pb.CloudProvider_ServiceDesc.ServiceName

// Run serves until ctx ends, then stops taking requests, lets in-flight
// ones finish within cfg.ShutdownGrace and returns nil. It returns an
// error if the gateway cannot start or a server fails.
func Run(ctx context.Context, cfg Config, deps Deps) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	host := command.Host{Logger: deps.Logger, Registry: deps.Registry, Health: deps.Health}.WithDefaults()
	log, registry, checks := host.Logger, host.Registry, host.Health
	reg := &trackingRegisterer{reg: registry}
	defer reg.unregisterAll()
	tp := deps.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}

	// Fail fast on unusable security material before touching NATS.
	var creds credentials.TransportCredentials
	if cfg.TLSEnabled() {
		reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_gateway_tls_reloads_total",
			Help: "Reloads of the gRPC TLS files after they changed, by result.",
		}, []string{"result"})
		if err := reg.Register(reloads); err != nil {
			return fmt.Errorf("registering metrics: %w", err)
		}
		rl, err := tlsfiles.New(tlsfiles.Files{CertFile: cfg.GRPCCertFile, KeyFile: cfg.GRPCKeyFile, ClientCAFile: cfg.GRPCClientCAFile}, log, func(err error) {
			if err != nil {
				reloads.WithLabelValues("error").Inc()
			} else {
				reloads.WithLabelValues("ok").Inc()
			}
		})
		if err != nil {
			return fmt.Errorf("gRPC TLS: %w", err)
		}
		creds = credentials.NewTLS(rl.ServerConfig())
	} else {
		log.Warn("serving gRPC without TLS (--grpc-insecure): any client that can reach the port can scale node groups")
	}
	var restTLS *tls.Config
	if cfg.RESTAddr != "" && cfg.RESTTLSEnabled() {
		reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_gateway_rest_tls_reloads_total",
			Help: "Reloads of the REST TLS files after they changed, by result.",
		}, []string{"result"})
		if err := reg.Register(reloads); err != nil {
			return fmt.Errorf("registering metrics: %w", err)
		}
		rl, err := tlsfiles.New(tlsfiles.Files{
			CertFile: cfg.RESTCertFile, KeyFile: cfg.RESTKeyFile, ClientCAFile: cfg.RESTClientCAFile,
			OptionalClientCA: true, NextProtos: []string{"h2", "http/1.1"},
		}, log, func(err error) {
			if err != nil {
				reloads.WithLabelValues("error").Inc()
			} else {
				reloads.WithLabelValues("ok").Inc()
			}
		})
		if err != nil {
			return fmt.Errorf("REST TLS: %w", err)
		}
		restTLS = rl.ServerConfig()
	} else if cfg.RESTAddr != "" {
		log.Warn("serving REST without TLS (--rest-insecure): bearer tokens and answers cross the network in plaintext")
	}
	if cfg.TLSEnabled() && len(cfg.GRPCAllowedClients) == 0 {
		log.Warn("--grpc-allowed-clients is empty: every client certificate the client CA verifies may call the gRPC API")
	}
	auth, err := rest.NewAuthenticator(rest.TokenConfig{
		AdminTokens: cfg.AdminTokens, ReadOnlyTokens: cfg.ReadOnlyTokens,
		AdminTokenFile: cfg.AdminTokenFile, ReadOnlyTokenFile: cfg.ReadOnlyTokenFile,
	}, log)
	if err != nil {
		return fmt.Errorf("REST tokens: %w", err)
	}
	if cfg.RESTAddr != "" && !auth.Configured() {
		log.Warn("no REST tokens configured: the admin API rejects every request")
	}
	var secretsKey *sealed.Key
	if cfg.SecretsKeyFile != "" {
		if secretsKey, err = sealed.LoadKeyFile(cfg.SecretsKeyFile); err != nil {
			return err
		}
		log.Info("cloud credentials written through the admin API are sealed", "key_id", secretsKey.ID())
	} else if cfg.RESTAddr != "" {
		log.Info("no --secrets-key-file: accounts can be written through the admin API, but not with credentials")
	}

	nc, js, closeNATS, err := messaging.Connect(ctx, deps.Conn, cfg.NATS, cfg.Topology, "api-gateway", log)
	if err != nil {
		return err
	}
	defer closeNATS()

	rm := app.NewReadModel()
	metrics.RegisterReadModel(reg, rm)
	lc := metrics.InstrumentLifecycle(natsreq.New(nc, natsreq.Options{AttemptTimeout: cfg.LifecycleAttemptTimeout, Logger: log, TracerProvider: tp}), reg)
	svc := app.NewService(rm, lc, app.Config{OpTimeout: cfg.LifecycleTimeout, GPULabel: cfg.GPULabel}, log)
	watcher := natskv.NewWatcher(js, rm, log, natskv.NewMetrics(reg))

	readModelReady := func(context.Context) error {
		if !rm.Synced() {
			return errors.New("read model has not loaded the initial state yet")
		}
		return nil
	}
	natsReady := func(context.Context) error {
		if !nc.IsConnected() {
			return fmt.Errorf("nats connection is %s", nc.Status())
		}
		return nil
	}
	checks.Add("api-gateway-readmodel", readModelReady)
	checks.Add("api-gateway-nats", natsReady)

	// Without tracing (no provider given, none installed: no OTEL_*
	// export asked for) the gRPC calls get no server span: CA makes tens
	// of thousands per loop, and an unrecorded span still cost each ~3% of
	// its CPU (B1).
	var grpcTP trace.TracerProvider
	if deps.TracerProvider != nil || tracing.Installed() {
		grpcTP = tp
	}
	grpcSrv, grpcHealth := newGRPCServer(cfg, creds, svc, reg, grpcTP, log)

	// Bind every listener before serving, so a taken port fails start-up
	// instead of half-starting the service.
	var listeners []net.Listener
	closeAll := func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}
	listen := func(addr string) (net.Listener, error) {
		l, err := run.Listen(addr)
		if err == nil {
			listeners = append(listeners, l)
		}
		return l, err
	}
	grpcL, err := listen(cfg.GRPCAddr)
	if err != nil {
		return err
	}
	addrs := Addrs{GRPC: grpcL.Addr().String()}
	var restSrv, healthSrv *http.Server
	var restL, healthL net.Listener
	if cfg.RESTAddr != "" {
		if restL, err = listen(cfg.RESTAddr); err != nil {
			closeAll()
			return err
		}
		addrs.REST = restL.Addr().String()
		if restTLS != nil {
			restL = tls.NewListener(restL, restTLS)
		}
		// Closed when the REST server starts shutting down: watch streams
		// say bye and end instead of holding the shutdown for its grace.
		restShutdown := make(chan struct{})
		api := rest.NewHandler(svc, auth, rest.Options{
			MaxBodyBytes: cfg.RESTMaxBodyBytes, Logger: log, Registry: reg, SecretsKey: secretsKey,
			RateLimit: cfg.RESTRateLimit, RateBurst: cfg.RESTRateBurst,
			MaxWatchers: cfg.RESTMaxWatchers, Shutdown: restShutdown,
			Shapes: natsask.New(nc),
		})
		restSrv = httpServer(otelhttp.NewHandler(restRoot(api), "rest",
			otelhttp.WithTracerProvider(tp),
			otelhttp.WithPropagators(tracing.Propagator),
			// Metrics come from the admin API's own Prometheus collectors.
			otelhttp.WithMeterProvider(noopmetric.NewMeterProvider()),
		), log)
		restSrv.RegisterOnShutdown(sync.OnceFunc(func() { close(restShutdown) }))
	}
	if cfg.HealthAddr != "" {
		if healthL, err = listen(cfg.HealthAddr); err != nil {
			closeAll()
			return err
		}
		addrs.Health = healthL.Addr().String()
		healthSrv = httpServer(health.Handler(checks, registry), log)
	}

	g, _ := run.NewGroup(ctx)
	g.Go("kv watch", watcher.Run)
	g.Go("grpc server", serveGRPC(grpcSrv, grpcHealth, grpcL, cfg.ShutdownGrace, log))
	if restSrv != nil {
		g.Go("rest server", run.HTTP(restSrv, restL, cfg.ShutdownGrace))
	}
	if healthSrv != nil {
		g.Go("health server", run.HTTP(healthSrv, healthL, cfg.ShutdownGrace))
	}
	g.Go("readiness", func(ctx context.Context) error {
		if err := rm.WaitFor(ctx, 0, 0); err != nil {
			log.Debug("shut down before the read model loaded", "err", err)
			return nil
		}
		setServing(grpcHealth, true)
		st := rm.Stats()
		log.Info("api-gateway ready", "grpc_addr", addrs.GRPC, "rest_addr", addrs.REST, "health_addr", addrs.Health,
			"tls", cfg.TLSEnabled(), "rest_tls", restTLS != nil, "groups", st.Groups, "instances", st.Instances)
		if deps.OnReady != nil {
			deps.OnReady(addrs)
		}
		// From then on the gRPC health service follows the same
		// conditions as /readyz, for gRPC probes and load balancers.
		followReadiness(ctx, grpcHealth, grpcHealthInterval, log, readModelReady, natsReady)
		return nil
	})
	err = g.Wait()
	log.Info("api-gateway stopped", "err", err)
	return err
}

func newGRPCServer(cfg Config, creds credentials.TransportCredentials, svc *app.Service, reg prometheus.Registerer, tp trace.TracerProvider, log *slog.Logger) (*grpc.Server, *grpchealth.Server) {
	m := grpcapi.NewMetrics(reg)
	var unary []grpc.UnaryServerInterceptor
	if tp != nil {
		// A server span per RPC, continuing the caller's trace when it
		// sends one; app and lifecycle requests run inside it. Outermost,
		// so the metrics interceptor's logs carry the trace.
		unary = append(unary, grpcapi.TracingInterceptor(tp, tracing.Propagator))
	}
	unary = append(unary, grpcapi.UnaryInterceptor(m, log))
	// Panics in stream handlers (reflection, health watches) become
	// codes.Internal too.
	stream := []grpc.StreamServerInterceptor{grpcapi.StreamInterceptor(m, log)}
	if creds != nil && len(cfg.GRPCAllowedClients) > 0 {
		// Inside the metrics interceptor: refusals are counted as
		// PermissionDenied.
		allow := grpcapi.NewClientAllowList(cfg.GRPCAllowedClients, log)
		unary = append(unary, allow.Unary())
		stream = append(stream, allow.Stream())
	}
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		grpc.MaxRecvMsgSize(cfg.GRPCMaxRecvMsgBytes),
		grpc.MaxConcurrentStreams(uint32(min(cfg.GRPCMaxConcurrentStreams, math.MaxUint32))),
		// CA's client sends no keepalive pings by default; allow modest
		// ones from other clients (grpcurl, probes) and drop abusers.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// Detect dead peers (a CA pod gone without a FIN) so their
		// connections do not linger.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second}),
		grpc.ConnectionTimeout(10 * time.Second),
	}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	if cfg.GRPCStreamWorkers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(uint32(cfg.GRPCStreamWorkers)))
	}
	srv := grpc.NewServer(opts...)
	pb.RegisterCloudProviderServer(srv, grpcapi.NewServer(svc))
	hs := grpchealth.NewServer()
	setServing(hs, false)
	healthpb.RegisterHealthServer(srv, hs)
	// Reflection lets grpcurl and friends call the API without the proto.
	reflection.Register(srv)
	return srv, hs
}

// grpcHealthInterval is how often the gRPC health status is re-evaluated.
const grpcHealthInterval = 2 * time.Second

// followReadiness sets the gRPC health status from the checks every
// interval until ctx ends, logging each change.
func followReadiness(ctx context.Context, hs *grpchealth.Server, interval time.Duration, log *slog.Logger, checks ...health.Check) {
	serving := true
	_ = run.Every(ctx, interval, func(ctx context.Context) {
		var failed error
		for _, check := range checks {
			if failed = check(ctx); failed != nil {
				break
			}
		}
		if now := failed == nil; now != serving {
			serving = now
			setServing(hs, serving)
			if serving {
				log.Info("gRPC health: serving again")
			} else {
				log.Warn("gRPC health: not serving", "err", failed)
			}
		}
	})
}

// setServing sets the status of the whole server and of the CloudProvider
// service.
func setServing(hs *grpchealth.Server, serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	hs.SetServingStatus("", st)
	hs.SetServingStatus(GRPCServiceName, st)
}

// serveGRPC serves until ctx ends, then reports NOT_SERVING, lets
// in-flight calls finish within grace and closes what remains.
func serveGRPC(srv *grpc.Server, hs *grpchealth.Server, l net.Listener, grace time.Duration, log *slog.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(l) }()
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
		}
		hs.Shutdown()
		done := make(chan struct{})
		go func() { srv.GracefulStop(); close(done) }()
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			log.Warn("gRPC calls still running after the shutdown grace period, closing them")
			srv.Stop()
			<-done
		}
		return nil
	}
}

func httpServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}
