// Package harness builds what nodesmith's benchmarks and fault-injection
// runs need: the simulated world (NATS JetStream, the CVM emulator with
// SSH-able VMs, a simulated cluster), the four services wired in-process
// with tunable settings or started as separate processes, seeded state, a
// Cluster-Autoscaler-like gRPC client and latency statistics.
//
// It mirrors dev/embedded's wiring, but exposes every knob a measurement
// needs (boot and ready delays, rate limits, parallelism, replicas) and
// keeps no state between runs: every World lives in a temporary directory.
package harness

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/crypto/ssh"

	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natsconn"
	"github.com/nodesmith/nodesmith/libs/natsembed"
	"github.com/nodesmith/nodesmith/libs/sealed"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
	"github.com/nodesmith/nodesmith/tools/simcluster"
	"github.com/nodesmith/nodesmith/tools/simvm"
)

// Account is the cloud account every benchmark group uses.
const Account = "bench"

// secretID is the account's key id on the emulator.
const secretID = "AKIDnodesmithbench00000000000000"

// ECSAccount is the Alibaba Cloud account of ECS groups (GroupSpec.ECS,
// WorldConfig.ECS): the emulator's ECS API, region ECSRegion.
const ECSAccount = "bench-ecs"

// ecsAccessKeyID is ECSAccount's RAM AccessKey id on the emulator.
const ecsAccessKeyID = "LTAI5tNodesmithBench000000"

// WorldConfig shapes the simulated world.
type WorldConfig struct {
	// Dir holds NATS storage, VM sandboxes, keys and credentials; it must
	// exist and is not removed by Close.
	Dir string
	// NATSPort is the NATS client port (-1: any free port).
	NATSPort int
	// NATSSync is how often JetStream syncs (and compacts) its files;
	// 0: the server's default (2 minutes).
	NATSSync time.Duration
	// BootDelay is how long a VM stays PENDING.
	BootDelay time.Duration
	// ReadyDelay is how long a joined node takes to become Ready.
	ReadyDelay time.Duration
	// RateLimits are the emulator's per-action limits (requests/s); nil
	// means unlimited, cvmemu.DefaultConfig().RateLimits are Tencent's.
	RateLimits map[string]float64
	// RunInstancesLatency is added to every RunInstances call.
	RunInstancesLatency time.Duration
	// NoSSH starts VMs without SSH servers (scenarios that run no hooks).
	NoSSH bool
	// NoCluster leaves joins unreported (lifecycle in no-cluster mode).
	NoCluster bool
	// ECS also serves the emulator's Alibaba Cloud ECS API (ECSEndpoint)
	// with ECSAccount's credentials in CredentialsDir: the same VMs,
	// SSH, cluster, quotas and rate limits.
	ECS bool
	// Logger receives the simulators' logs; nil discards them.
	Logger *slog.Logger
}

// World is a running simulated world.
type World struct {
	cfg WorldConfig
	// NATS is the JetStream server every service connects to.
	NATS *natsembed.Server
	// NATSKeys are the services' NATS identities (fresh per world).
	NATSKeys *natsauth.Keys
	// natsAdmin is the harness's own unrestricted user (ConnectNATSAdmin).
	natsAdmin *natsauth.Admin
	// NATSStoreDir is NATS's storage (a restart must reuse it).
	NATSStoreDir string
	// NATSPort is the bound client port.
	NATSPort int
	// Cluster is the simulated Kubernetes cluster (nil with NoCluster).
	Cluster *simcluster.Cluster
	// VMs starts the VMs' SSH servers (nil with NoSSH).
	VMs *simvm.Factory
	// Emulator is the CVM API.
	Emulator *cvmemu.Server
	// ECSEndpoint is the same emulator's ECS API (host:port), with
	// WorldConfig.ECS.
	ECSEndpoint string
	// SSHPort is the port of every VM's SSH server.
	SSHPort int
	// ClientKeyFile is the hook runner's private key (OpenSSH PEM).
	ClientKeyFile string
	// ClientKey signs as the hook runner.
	ClientKey ssh.Signer
	// KnownHosts trusts every VM (a @cert-authority line).
	KnownHosts string
	// SecretsKeyFile is the sealing key ring of lifecycle, the gateway, the
	// cloud adapters and the hook runners (hook env values are sealed).
	SecretsKeyFile string
	// CredentialsDir holds <account>/secretId and secretKey for the cloud-adapter.
	CredentialsDir string
}

// StartWorld starts NATS, the cluster, the VM factory and the emulator.
func StartWorld(cfg WorldConfig) (w *World, err error) {
	if cfg.Dir == "" {
		return nil, errors.New("harness: WorldConfig.Dir is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w = &World{cfg: cfg, NATSStoreDir: filepath.Join(cfg.Dir, "nats")}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()

	clientKey, pemKey, err := newEd25519()
	if err != nil {
		return nil, err
	}
	hostCA, _, err := newEd25519()
	if err != nil {
		return nil, err
	}
	w.ClientKey = clientKey
	w.ClientKeyFile = filepath.Join(cfg.Dir, "keys", "client_ed25519")
	if err := writeFile(w.ClientKeyFile, pemKey); err != nil {
		return nil, err
	}
	// A random high port keeps concurrent runs (and `make run`) apart;
	// every VM binds its own loopback IP on it.
	w.SSHPort = 20000 + mrand.IntN(20000)
	w.KnownHosts = filepath.Join(cfg.Dir, "keys", "known_hosts")
	if err := simvm.WriteKnownHostsCA(w.KnownHosts, hostCA.PublicKey(), w.SSHPort); err != nil {
		return nil, err
	}
	w.SecretsKeyFile = filepath.Join(cfg.Dir, "keys", "secrets.key")
	if _, err := sealed.GenerateKeyFile(w.SecretsKeyFile); err != nil {
		return nil, err
	}
	secret := randomHex(24)
	w.CredentialsDir = filepath.Join(cfg.Dir, "credentials")
	if err := writeFile(filepath.Join(w.CredentialsDir, Account, "secretId"), []byte(secretID)); err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(w.CredentialsDir, Account, "secretKey"), []byte(secret)); err != nil {
		return nil, err
	}

	ecsSecret := randomHex(24)
	if cfg.ECS {
		if err := writeFile(filepath.Join(w.CredentialsDir, ECSAccount, "secretId"), []byte(ecsAccessKeyID)); err != nil {
			return nil, err
		}
		if err := writeFile(filepath.Join(w.CredentialsDir, ECSAccount, "secretKey"), []byte(ecsSecret)); err != nil {
			return nil, err
		}
	}

	port := cfg.NATSPort
	if port == 0 {
		port = -1
	}
	if w.natsAdmin, err = natsauth.NewAdmin(); err != nil {
		return nil, err
	}
	if w.NATSKeys, err = natsauth.GenerateKeys(); err != nil {
		return nil, err
	}
	if w.NATS, err = w.startNATS(port); err != nil {
		return nil, err
	}
	w.NATSPort = portOf(w.NATS.ClientURL())

	var opts []cvmemu.Option
	if !cfg.NoCluster {
		w.Cluster = simcluster.New(simcluster.Options{ReadyDelay: cfg.ReadyDelay, Logger: log.With("component", "simcluster")})
		opts = append(opts, cvmemu.WithCluster(w.Cluster))
	}
	if !cfg.NoSSH {
		vmCfg := simvm.DefaultConfig()
		vmCfg.Root = filepath.Join(cfg.Dir, "vms")
		vmCfg.Port = w.SSHPort
		vmCfg.AuthorizedKeys = []ssh.PublicKey{clientKey.PublicKey()}
		vmCfg.HostCA = hostCA
		vmCfg.Logger = log.With("component", "simvm")
		if w.VMs, err = simvm.NewFactory(vmCfg); err != nil {
			return nil, err
		}
		opts = append(opts, cvmemu.WithSSH(w.VMs))
	}
	emuCfg := cvmemu.DefaultConfig()
	emuCfg.Credentials = map[string]string{secretID: secret}
	emuCfg.Accounts = map[string]string{secretID: Account}
	if cfg.ECS {
		emuCfg.Credentials[ecsAccessKeyID] = ecsSecret
		emuCfg.Accounts[ecsAccessKeyID] = ECSAccount
	}
	emuCfg.BootDelay = cfg.BootDelay
	emuCfg.TerminateDelay = 0
	emuCfg.RateLimits = cfg.RateLimits
	emuCfg.Logger = log.With("component", "cvmemu")
	if w.Emulator, err = cvmemu.Start("127.0.0.1:0", emuCfg, opts...); err != nil {
		return nil, err
	}
	if cfg.ECS {
		if w.ECSEndpoint, err = w.Emulator.ServeECS("127.0.0.1:0"); err != nil {
			return nil, err
		}
	}
	if cfg.RunInstancesLatency > 0 {
		w.Emulator.SetFaults(cvmemu.ActionRunInstances, cvmemu.ActionFaults{Latency: cfg.RunInstancesLatency})
	}
	return w, nil
}

func (w *World) startNATS(port int) (*natsembed.Server, error) {
	users, err := w.NATSKeys.ServerUsers()
	if err != nil {
		return nil, err
	}
	users = append(users, w.natsAdmin.User)
	return natsembed.Start(natsembed.Options{Port: port, StoreDir: w.NATSStoreDir, Users: users, SyncInterval: w.cfg.NATSSync})
}

// NATSOptions are the --nats-* options of a service replica connecting as
// id, named name.
func (w *World) NATSOptions(id natsauth.Identity, name string) natsconn.Options {
	return w.NATSKeys.ConnOptions(id, natsconn.Options{URL: w.NATSURL(), Name: name})
}

// ConnectNATS dials the server as id (harness observers use lifecycle's,
// the bootstrap identity).
func (w *World) ConnectNATS(id natsauth.Identity, opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(w.NATSURL(), append(w.NATSKeys.NATSOptions(id), opts...)...)
}

// ConnectNATSAdmin dials the server as the harness's unrestricted user, for
// what no service may do (a fault deleting a bucket).
func (w *World) ConnectNATSAdmin(opts ...nats.Option) (*nats.Conn, error) {
	auth, err := w.natsAdmin.NATSOptions()
	if err != nil {
		return nil, err
	}
	return nats.Connect(w.NATSURL(), append(auth, opts...)...)
}

// NATSURL is the client URL of the NATS server.
func (w *World) NATSURL() string { return fmt.Sprintf("nats://127.0.0.1:%d", w.NATSPort) }

// RestartNATS stops the NATS server and starts it again on the same port
// and storage, as a pod restart would.
func (w *World) RestartNATS(down time.Duration) error {
	w.NATS.Shutdown()
	time.Sleep(down)
	ns, err := w.startNATS(w.NATSPort)
	if err != nil {
		return fmt.Errorf("restarting NATS: %w", err)
	}
	w.NATS = ns
	return nil
}

// Close stops everything the world started, emulator first.
func (w *World) Close() {
	if w.Emulator != nil {
		_ = w.Emulator.Close()
	}
	if w.VMs != nil {
		_ = w.VMs.Close()
	}
	if w.Cluster != nil {
		w.Cluster.Close()
	}
	if w.NATS != nil {
		w.NATS.Shutdown()
	}
}

func newEd25519() (ssh.Signer, []byte, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "nodesmith bench")
	if err != nil {
		return nil, nil, fmt.Errorf("encoding key: %w", err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, nil, err
	}
	return s, pem.EncodeToMemory(block), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// portOf returns the port of a nats:// URL (0 if it has none).
func portOf(u string) int {
	p, err := url.Parse(u)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p.Port())
	return n
}

// OnNATS is a world of nothing but an existing NATS server at url, for
// scenarios that run only services reading state (the gateway).
func OnNATS(url string, keys *natsauth.Keys) *World {
	return &World{NATSPort: portOf(url), NATSKeys: keys}
}
