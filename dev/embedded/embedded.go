// Package embedded runs the whole nodesmith system in one process for
// development: an embedded NATS JetStream server with file storage, the four
// services (each with its own NATS connection, exactly as in production),
// the Tencent CVM emulator, SSH-able simulated VMs and a simulated cluster,
// or with Config.Kube a real kube-apiserver where the VMs register Nodes.
// State lives in Config.DataDir and survives a restart.
package embedded

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Config configures the embedded stack.
type Config struct {
	// DataDir holds NATS storage, the emulator's state, VM sandboxes and keys.
	DataDir string
	// GRPCAddr serves Cluster Autoscaler's externalgrpc API (plaintext here only).
	GRPCAddr string
	// RESTAddr serves the REST admin API.
	RESTAddr string
	// OpsAddr serves /metrics, /livez and /readyz for every service.
	OpsAddr string
	// NATSPort is the embedded NATS server's client port (-1: any free port).
	NATSPort int
	// EmulatorAddr serves the Tencent CVM API emulator.
	EmulatorAddr string
	// ECSEmulatorAddr serves the Alibaba Cloud ECS API of the same
	// emulator (one simulated world, two clouds' APIs).
	ECSEmulatorAddr string
	// MetadataAddr serves the simulated VMs' instance metadata (a VM's
	// metadata URL is http://MetadataAddr/<instance-id>: spot termination
	// notices for the node agent).
	MetadataAddr string
	// EmulatorAdminAddr serves the emulator's test-control API (stock-outs,
	// spot reclaims). It has no authentication: keep it on loopback.
	EmulatorAdminAddr string
	// SSHPort is the port every simulated VM's SSH server listens on (on its own loopback IP).
	SSHPort int
	// ConfigFile is a node-group configuration to use instead of the built-in one.
	ConfigFile string
	// AdminToken for the REST API; empty means ADMIN_TOKEN from the
	// environment, or a generated one kept in DataDir.
	AdminToken string
	// BootDelay is how long a simulated VM takes to reach RUNNING.
	BootDelay time.Duration
	// ReadyDelay is how long a joined node takes to become Ready.
	ReadyDelay time.Duration
	// Kube runs a real kube-apiserver: lifecycle in Kubernetes mode
	// against it, the simulated VMs registering Nodes in it (see Kube).
	Kube bool
	// Quiet hides the banner (tests).
	Quiet bool
	// OfferingUnavailableTTL is the cloud adapter's
	// --offering-unavailable-ttl (0: its default).
	OfferingUnavailableTTL time.Duration
	// EmulatorKeys are more API keys the CVM emulator accepts, each for a
	// named emulator account (e.g. for accounts created through the admin
	// API with their own credentials). The built-in "dev" key is always
	// accepted.
	EmulatorKeys []EmulatorKey
}

// EmulatorKey is one API key of the CVM emulator.
type EmulatorKey struct {
	SecretID, SecretKey string
	// Account is the emulator account the key acts as (its VMs, quotas).
	Account string
}

// DefaultConfig is what `make run` uses.
func DefaultConfig() Config {
	return Config{
		DataDir:           ".data",
		GRPCAddr:          "127.0.0.1:8086",
		RESTAddr:          "127.0.0.1:8080",
		OpsAddr:           "127.0.0.1:8087",
		NATSPort:          4222,
		EmulatorAddr:      "127.0.0.1:9180",
		ECSEmulatorAddr:   "127.0.0.1:9181",
		MetadataAddr:      "127.0.0.1:9182",
		EmulatorAdminAddr: "127.0.0.1:9183",
		SSHPort:           2222,
		BootDelay:         2 * time.Second,
		ReadyDelay:        time.Second,
	}
}

// RegisterFlags binds the config to flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "where state lives (NATS storage, emulator VMs, keys); delete it to start over")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "externalgrpc address for Cluster Autoscaler (plaintext in this embedded stack)")
	fs.StringVar(&c.RESTAddr, "rest-addr", c.RESTAddr, "REST admin API address")
	fs.StringVar(&c.OpsAddr, "ops-addr", c.OpsAddr, "/metrics, /livez and /readyz address")
	fs.IntVar(&c.NATSPort, "nats-port", c.NATSPort, "embedded NATS client port (-1: any free port)")
	fs.StringVar(&c.EmulatorAddr, "emulator-addr", c.EmulatorAddr, "Tencent CVM API emulator address")
	fs.StringVar(&c.ECSEmulatorAddr, "ecs-emulator-addr", c.ECSEmulatorAddr, "Alibaba Cloud ECS API emulator address")
	fs.StringVar(&c.MetadataAddr, "metadata-addr", c.MetadataAddr, "the simulated VMs' instance metadata service (http://ADDR/<instance-id>/latest/meta-data/...)")
	fs.StringVar(&c.EmulatorAdminAddr, "emulator-admin-addr", c.EmulatorAdminAddr, "emulator test-control API: stock-outs, spot reclaims (no authentication: loopback only)")
	fs.IntVar(&c.SSHPort, "ssh-port", c.SSHPort, "SSH port of the simulated VMs")
	fs.StringVar(&c.ConfigFile, "config", c.ConfigFile, "node-group configuration file (default: the built-in one)")
	fs.StringVar(&c.AdminToken, "admin-token", c.AdminToken, "REST admin bearer token (default: $ADMIN_TOKEN or a generated one)")
	fs.DurationVar(&c.BootDelay, "vm-boot-delay", c.BootDelay, "time a simulated VM takes to boot")
	fs.DurationVar(&c.ReadyDelay, "node-ready-delay", c.ReadyDelay, "time a joined node takes to become Ready")
	fs.BoolVar(&c.Kube, "kube", c.Kube, "run a real kube-apiserver (etcd: make test-deps; kube-apiserver: make kube-apiserver): lifecycle in Kubernetes mode, the VMs register Nodes there, for a real Cluster Autoscaler")
}

// Validate checks the config.
func (c Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("--data-dir is required"))
	}
	for name, addr := range map[string]string{"--grpc-addr": c.GRPCAddr, "--rest-addr": c.RESTAddr, "--ops-addr": c.OpsAddr, "--emulator-addr": c.EmulatorAddr, "--ecs-emulator-addr": c.ECSEmulatorAddr, "--metadata-addr": c.MetadataAddr, "--emulator-admin-addr": c.EmulatorAdminAddr} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", name, addr, err))
		}
	}
	if h, _, err := net.SplitHostPort(c.EmulatorAdminAddr); err == nil {
		if ip := net.ParseIP(h); h != "localhost" && (ip == nil || !ip.IsLoopback()) {
			errs = append(errs, fmt.Errorf("--emulator-admin-addr %q: the emulator's admin API has no authentication; serve it on a loopback address", c.EmulatorAdminAddr))
		}
	}
	if c.SSHPort <= 0 || c.SSHPort > 65535 {
		errs = append(errs, fmt.Errorf("--ssh-port %d: want 1-65535", c.SSHPort))
	}
	return errors.Join(errs...)
}

func (c Config) path(elem ...string) string {
	return filepath.Join(append([]string{c.DataDir}, elem...)...)
}

// opsServer is the combined ops endpoint.
type opsServer struct {
	// Addr is the bound address.
	Addr string
	// Stop shuts it down.
	Stop func()
}

// serveOps serves the combined ops endpoint.
func serveOps(ctx context.Context, addr string, comps []*component, log *slog.Logger) (*opsServer, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ops endpoint: %w", err)
	}
	srv := &http.Server{Handler: opsHandler(comps), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("ops endpoint failed", "err", err)
		}
	}()
	return &opsServer{Addr: l.Addr().String(), Stop: func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}}, nil
}

// waitReady polls every component's readiness until all pass or ctx ends.
func waitReady(ctx context.Context, comps map[string]*component) bool {
	for {
		ready := true
		for _, c := range comps {
			if c.ready(ctx) != nil {
				ready = false
				break
			}
		}
		if ready {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func ensureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	return nil
}
