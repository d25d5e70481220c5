package service

import (
	"errors"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/config"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsconn"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/rest"
)

// Environment variables holding REST bearer tokens directly (comma or
// newline separated). Tokens are secrets: they are read from files or the
// environment, never from flags.
const (
	EnvAdminTokens    = "NODESMITH_REST_ADMIN_TOKENS"
	EnvReadOnlyTokens = "NODESMITH_REST_READONLY_TOKENS"
)

// Config configures the api-gateway.
type Config struct {
	// GRPCAddr is where Cluster Autoscaler's externalgrpc client connects.
	GRPCAddr string
	// RESTAddr serves the admin API; empty disables it.
	RESTAddr string
	// HealthAddr serves /livez, /readyz and /metrics; empty disables it
	// (the embedded launcher serves one combined endpoint).
	HealthAddr string

	// GRPCCertFile, GRPCKeyFile and GRPCClientCAFile enable TLS with
	// client-certificate verification (mTLS). The files are re-read when
	// they change.
	GRPCCertFile, GRPCKeyFile, GRPCClientCAFile string
	// GRPCInsecure serves gRPC in plaintext. It must be chosen explicitly:
	// without it and without certificates the gateway refuses to start.
	GRPCInsecure bool
	// GRPCMaxRecvMsgBytes bounds request messages (DeleteNodes with many
	// nodes is the largest CA sends).
	GRPCMaxRecvMsgBytes int
	// GRPCAllowedClients are the client identities admitted over mTLS: a
	// client certificate's URI SAN (SPIFFE id), DNS SAN or common name must
	// equal one of them, or the call gets PermissionDenied. Only with mTLS;
	// empty admits every certificate the client CA verifies.
	GRPCAllowedClients []string
	// GRPCMaxConcurrentStreams bounds the concurrent calls of one client
	// connection.
	GRPCMaxConcurrentStreams uint
	// GRPCStreamWorkers is how many long-lived goroutines serve gRPC calls
	// (grpc.NumStreamWorkers); a call that finds them all busy gets a
	// goroutine of its own, as every call does with 0. Reused goroutines
	// keep their grown stacks: a fresh goroutine per call grows its stack
	// on every call, which cost the gateway ~11% of its CPU per call on
	// Cluster Autoscaler's loop (B1, issue 21).
	GRPCStreamWorkers uint

	// RESTCertFile and RESTKeyFile serve the REST port over TLS (re-read
	// when they change); RESTClientCAFile additionally requires client
	// certificates chaining to it (mTLS; bearer tokens are still needed).
	RESTCertFile, RESTKeyFile, RESTClientCAFile string
	// RESTInsecure serves REST in plaintext. It must be chosen explicitly:
	// with a REST address but neither it nor a certificate the gateway
	// refuses to start.
	RESTInsecure bool
	// RESTRateLimit is the steady rate of requests each bearer token may
	// make on this replica (per second; 0 disables the limit) and
	// RESTRateBurst how many it may make at once.
	RESTRateLimit float64
	RESTRateBurst int
	// RESTMaxWatchers bounds the open GET /api/v1/watch streams on this
	// replica; past it a watch gets 429.
	RESTMaxWatchers int

	// AdminTokenFile and ReadOnlyTokenFile hold REST bearer tokens, one per
	// line; re-read when they change.
	AdminTokenFile, ReadOnlyTokenFile string
	// AdminTokens and ReadOnlyTokens are tokens given directly (by
	// LoadEnv from EnvAdminTokens / EnvReadOnlyTokens, or by a host).
	AdminTokens, ReadOnlyTokens []string
	// RESTMaxBodyBytes bounds admin API request bodies.
	RESTMaxBodyBytes int64
	// SecretsKeyFile holds the key (base64 of 32 random bytes) that seals
	// cloud credentials written through the admin API; the cloud adapters
	// need the same file. Empty: account writes that carry credentials
	// are refused (503), others work.
	SecretsKeyFile string

	// LifecycleTimeout bounds a mutation end to end (lifecycle round trip
	// with retries plus the read-your-writes wait). Keep it below CA's
	// grpc_timeout (5s by default).
	LifecycleTimeout time.Duration
	// LifecycleAttemptTimeout bounds one attempt of a lifecycle operation;
	// an unanswered attempt is retried with the same request id.
	LifecycleAttemptTimeout time.Duration

	// GPULabel is the node label naming a node's GPU type (GPULabel RPC).
	GPULabel string

	// ShutdownGrace is how long in-flight requests may finish at shutdown.
	ShutdownGrace time.Duration

	// NATS is the connection used when Deps.Conn is nil.
	NATS natsconn.Options
	// Topology are the --js-* options. Lifecycle alone ensures the
	// topology with them; the gateway waits for the buckets and accepts
	// the flags only so one shared environment configures every service.
	Topology messaging.Options
}

// DefaultAllowedClient is Cluster Autoscaler's identity as
// deploy/kustomize/components/mtls issues it: the SPIFFE id of its service
// account (nodesmith/cluster-autoscaler), a URI SAN of its client
// certificate.
const DefaultAllowedClient = "spiffe://cluster.local/ns/nodesmith/sa/cluster-autoscaler"

// MaxStreamWorkers bounds --grpc-stream-workers: idle workers cost a
// goroutine each, and beyond the calls that run at once they buy nothing.
const MaxStreamWorkers = 1024

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		GRPCAddr:                 ":8086",
		RESTAddr:                 ":8080",
		HealthAddr:               ":8087",
		GRPCMaxRecvMsgBytes:      16 << 20,
		GRPCAllowedClients:       []string{DefaultAllowedClient},
		GRPCMaxConcurrentStreams: 256,
		GRPCStreamWorkers:        uint(runtime.GOMAXPROCS(0)),
		RESTRateLimit:            10,
		RESTRateBurst:            40,
		RESTMaxWatchers:          rest.DefaultMaxWatchers,
		RESTMaxBodyBytes:         rest.DefaultMaxBodyBytes,
		LifecycleTimeout:         4 * time.Second,
		LifecycleAttemptTimeout:  1500 * time.Millisecond,
		GPULabel:                 "nodesmith.io/gpu-type",
		ShutdownGrace:            10 * time.Second,
		NATS:                     natsconn.Options{URL: "nats://127.0.0.1:4222", Name: "api-gateway"},
		Topology:                 messaging.DefaultOptions(),
	}
}

// RegisterFlags binds c's fields to flags (and so, through
// libs/config.Parse, to NODESMITH_* environment variables).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "address of the externalgrpc CloudProvider server (Cluster Autoscaler connects here)")
	fs.StringVar(&c.RESTAddr, "rest-addr", c.RESTAddr, "address of the REST admin API; empty disables it")
	fs.StringVar(&c.HealthAddr, "health-addr", c.HealthAddr, "address of /livez, /readyz and /metrics; empty disables it")
	fs.StringVar(&c.GRPCCertFile, "grpc-cert-file", c.GRPCCertFile, "PEM server certificate for gRPC TLS (its SAN must match the host in CA's cloud-config address)")
	fs.StringVar(&c.GRPCKeyFile, "grpc-key-file", c.GRPCKeyFile, "PEM private key of --grpc-cert-file")
	fs.StringVar(&c.GRPCClientCAFile, "grpc-client-ca-file", c.GRPCClientCAFile, "PEM CA bundle that client certificates must chain to (mTLS)")
	fs.BoolVar(&c.GRPCInsecure, "grpc-insecure", c.GRPCInsecure, "serve gRPC without TLS (development only)")
	fs.IntVar(&c.GRPCMaxRecvMsgBytes, "grpc-max-recv-msg-bytes", c.GRPCMaxRecvMsgBytes, "largest gRPC request accepted, in bytes")
	fs.Var((*commaList)(&c.GRPCAllowedClients), "grpc-allowed-clients", "comma-separated client identities admitted over mTLS, each matched exactly against a client certificate's URI SANs (SPIFFE ids), DNS SANs and common name; others get PermissionDenied. Empty admits every certificate the client CA verifies")
	fs.UintVar(&c.GRPCMaxConcurrentStreams, "grpc-max-concurrent-streams", c.GRPCMaxConcurrentStreams, "most concurrent gRPC calls on one client connection")
	fs.UintVar(&c.GRPCStreamWorkers, "grpc-stream-workers", c.GRPCStreamWorkers, "goroutines kept to serve gRPC calls (default: GOMAXPROCS); a call finding all busy gets its own, as every call does with 0")
	fs.StringVar(&c.RESTCertFile, "rest-tls-cert-file", c.RESTCertFile, "PEM server certificate for REST over TLS (re-read when it changes)")
	fs.StringVar(&c.RESTKeyFile, "rest-tls-key-file", c.RESTKeyFile, "PEM private key of --rest-tls-cert-file")
	fs.StringVar(&c.RESTClientCAFile, "rest-tls-client-ca-file", c.RESTClientCAFile, "optional PEM CA bundle: REST clients must then present a certificate chaining to it (mTLS), on top of their bearer token")
	fs.BoolVar(&c.RESTInsecure, "rest-insecure", c.RESTInsecure, "serve REST without TLS (development only; bearer tokens travel in plaintext)")
	fs.Float64Var(&c.RESTRateLimit, "rest-rate-limit", c.RESTRateLimit, "requests per second each REST bearer token may make on this replica (token bucket; 0 disables)")
	fs.IntVar(&c.RESTRateBurst, "rest-rate-burst", c.RESTRateBurst, "requests a REST bearer token may make at once before --rest-rate-limit applies")
	fs.IntVar(&c.RESTMaxWatchers, "rest-max-watchers", c.RESTMaxWatchers, "most open GET /api/v1/watch event streams on this replica; more get 429")
	fs.StringVar(&c.AdminTokenFile, "rest-admin-token-file", c.AdminTokenFile, "file of REST admin bearer tokens, one per line (also "+EnvAdminTokens+")")
	fs.StringVar(&c.ReadOnlyTokenFile, "rest-readonly-token-file", c.ReadOnlyTokenFile, "file of REST read-only bearer tokens, one per line (also "+EnvReadOnlyTokens+")")
	fs.Int64Var(&c.RESTMaxBodyBytes, "rest-max-body-bytes", c.RESTMaxBodyBytes, "largest REST request body accepted, in bytes")
	fs.StringVar(&c.SecretsKeyFile, "secrets-key-file", c.SecretsKeyFile, "file with the key (base64 of 32 random bytes) that seals cloud credentials written to /api/v1/accounts; the cloud adapters need the same file")
	fs.DurationVar(&c.LifecycleTimeout, "lifecycle-timeout", c.LifecycleTimeout, "deadline of a mutation (lifecycle round trip and read-your-writes wait); keep below CA's grpc_timeout")
	fs.DurationVar(&c.LifecycleAttemptTimeout, "lifecycle-attempt-timeout", c.LifecycleAttemptTimeout, "deadline of one attempt of a lifecycle operation; an unanswered attempt is retried with the same request id")
	fs.StringVar(&c.GPULabel, "gpu-label", c.GPULabel, "node label whose value is the node's GPU type")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", c.ShutdownGrace, "how long in-flight requests may finish at shutdown")
	c.NATS.RegisterFlags(fs)
	c.Topology.RegisterFlags(fs)
	config.AcceptEnv(fs, EnvAdminTokens, EnvReadOnlyTokens)
}

// LoadEnv reads the token variables (EnvAdminTokens, EnvReadOnlyTokens)
// with lookup and appends their tokens.
func (c *Config) LoadEnv(lookup func(string) (string, bool)) {
	split := func(s string) []string {
		var out []string
		for _, t := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
			if t = strings.TrimSpace(t); t != "" {
				out = append(out, t)
			}
		}
		return out
	}
	if v, ok := lookup(EnvAdminTokens); ok {
		c.AdminTokens = append(c.AdminTokens, split(v)...)
	}
	if v, ok := lookup(EnvReadOnlyTokens); ok {
		c.ReadOnlyTokens = append(c.ReadOnlyTokens, split(v)...)
	}
}

// TLSEnabled reports whether gRPC is served with mTLS.
func (c Config) TLSEnabled() bool {
	return c.GRPCCertFile != "" || c.GRPCKeyFile != "" || c.GRPCClientCAFile != ""
}

// RESTTLSEnabled reports whether REST is served over TLS.
func (c Config) RESTTLSEnabled() bool {
	return c.RESTCertFile != "" || c.RESTKeyFile != "" || c.RESTClientCAFile != ""
}

// commaList is a flag of comma-separated values.
type commaList []string

func (l *commaList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

func (l *commaList) Set(v string) error {
	*l = nil
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// Validate reports every invalid setting at once.
func (c Config) Validate() error {
	var errs []error
	if c.GRPCAddr == "" {
		errs = append(errs, errors.New("--grpc-addr is required"))
	}
	switch {
	case c.TLSEnabled() && c.GRPCInsecure:
		errs = append(errs, errors.New("--grpc-insecure conflicts with --grpc-cert-file/--grpc-key-file/--grpc-client-ca-file"))
	case c.TLSEnabled() && (c.GRPCCertFile == "" || c.GRPCKeyFile == "" || c.GRPCClientCAFile == ""):
		errs = append(errs, errors.New("gRPC TLS needs all of --grpc-cert-file, --grpc-key-file and --grpc-client-ca-file (client certificates are always verified)"))
	case !c.TLSEnabled() && !c.GRPCInsecure:
		errs = append(errs, errors.New("refusing to serve gRPC without TLS: set --grpc-cert-file, --grpc-key-file and --grpc-client-ca-file, or --grpc-insecure explicitly"))
	}
	if c.RESTAddr != "" {
		switch {
		case c.RESTTLSEnabled() && c.RESTInsecure:
			errs = append(errs, errors.New("--rest-insecure conflicts with --rest-tls-cert-file/--rest-tls-key-file/--rest-tls-client-ca-file"))
		case c.RESTTLSEnabled() && (c.RESTCertFile == "" || c.RESTKeyFile == ""):
			errs = append(errs, errors.New("REST TLS needs both --rest-tls-cert-file and --rest-tls-key-file"))
		case !c.RESTTLSEnabled() && !c.RESTInsecure:
			errs = append(errs, errors.New("refusing to serve REST without TLS: set --rest-tls-cert-file and --rest-tls-key-file, or --rest-insecure explicitly (or disable REST with --rest-addr=)"))
		}
	}
	if c.GRPCMaxConcurrentStreams < 1 {
		errs = append(errs, errors.New("--grpc-max-concurrent-streams must be at least 1"))
	}
	if c.GRPCStreamWorkers > MaxStreamWorkers {
		errs = append(errs, fmt.Errorf("--grpc-stream-workers must be at most %d, got %d", MaxStreamWorkers, c.GRPCStreamWorkers))
	}
	if c.RESTRateLimit < 0 {
		errs = append(errs, fmt.Errorf("--rest-rate-limit must not be negative, got %v", c.RESTRateLimit))
	}
	if c.RESTRateLimit > 0 && c.RESTRateBurst < 1 {
		errs = append(errs, fmt.Errorf("--rest-rate-burst must be at least 1, got %d", c.RESTRateBurst))
	}
	if c.RESTMaxWatchers < 1 {
		errs = append(errs, fmt.Errorf("--rest-max-watchers must be at least 1, got %d", c.RESTMaxWatchers))
	}
	if c.GRPCMaxRecvMsgBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("--grpc-max-recv-msg-bytes must be at least 1MiB, got %d", c.GRPCMaxRecvMsgBytes))
	}
	if c.RESTMaxBodyBytes < 1024 {
		errs = append(errs, fmt.Errorf("--rest-max-body-bytes must be at least 1024, got %d", c.RESTMaxBodyBytes))
	}
	if c.LifecycleTimeout <= 0 {
		errs = append(errs, errors.New("--lifecycle-timeout must be positive"))
	}
	if c.LifecycleAttemptTimeout <= 0 || c.LifecycleAttemptTimeout > c.LifecycleTimeout {
		errs = append(errs, errors.New("--lifecycle-attempt-timeout must be positive and at most --lifecycle-timeout"))
	}
	if c.GPULabel == "" {
		errs = append(errs, errors.New("--gpu-label is required"))
	}
	if c.ShutdownGrace <= 0 {
		errs = append(errs, errors.New("--shutdown-grace must be positive"))
	}
	if err := c.Topology.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("topology: %w", err))
	}
	return errors.Join(errs...)
}
