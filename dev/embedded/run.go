package embedded

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/nodesmith/nodesmith/dev/kubesim"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natsconn"
	"github.com/nodesmith/nodesmith/libs/natsembed"
	"github.com/nodesmith/nodesmith/libs/run"
	"github.com/nodesmith/nodesmith/libs/sealed"
	gateway "github.com/nodesmith/nodesmith/services/api-gateway/service"
	cloudadapter "github.com/nodesmith/nodesmith/services/cloud-adapter/service"
	hookrunner "github.com/nodesmith/nodesmith/services/hook-runner/service"
	lifecycle "github.com/nodesmith/nodesmith/services/lifecycle/service"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
	"github.com/nodesmith/nodesmith/tools/simcluster"
	"github.com/nodesmith/nodesmith/tools/simvm"
)

// DefaultNodeGroupConfig is the built-in node-group configuration.
//
//go:embed default-config.yaml
var DefaultNodeGroupConfig []byte

// emulatorSecretID is the dev account's key id on the emulator; its secret
// is generated per data directory.
const emulatorSecretID = "AKIDnodesmithdev0000000000000000"

// ecsAccessKeyID is the alibaba-dev account's RAM AccessKey id on the
// emulator's ECS API; its secret is generated per data directory.
const ecsAccessKeyID = "LTAI5tNodesmithDev00000000"

// The accounts of the built-in configuration (default-config.yaml).
const (
	devAccount     = "dev"
	alibabaAccount = "alibaba-dev"
)

// Addrs tells where the running stack listens.
type Addrs struct {
	GRPC, REST, Ops, NATS, Emulator string
	// ECSEmulator serves the Alibaba Cloud ECS API of the same emulator.
	ECSEmulator string
	// Metadata is the VMs' metadata service; EmulatorAdmin the emulator's
	// test-control API (stock-outs, spot reclaims).
	Metadata, EmulatorAdmin string
	AdminToken              string
	// Kube is the Kubernetes side (nil without Config.Kube).
	Kube *Kube
}

// Run starts the embedded stack, calls onReady once every service serves,
// and blocks until ctx ends; then it stops the services (each drains its
// in-flight work), the simulators and NATS, in that order.
func Run(ctx context.Context, cfg Config, log *slog.Logger, onReady func(Addrs)) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := ensureDir(cfg.DataDir); err != nil {
		return err
	}
	if abs, err := filepath.Abs(cfg.DataDir); err == nil {
		cfg.DataDir = abs
	}
	nodeGroups := DefaultNodeGroupConfig
	if cfg.ConfigFile != "" {
		if err := lifecycle.ValidateConfigFile(cfg.ConfigFile); err != nil {
			return err
		}
	} else if err := lifecycle.ValidateConfigData("built-in config", nodeGroups, ""); err != nil {
		return err
	}

	// Secrets and keys, kept in the data dir so a restart reuses them.
	clientKey, err := loadOrCreateSigner(cfg.path("keys", "hook-runner_ed25519"))
	if err != nil {
		return err
	}
	hostCA, err := loadOrCreateSigner(cfg.path("keys", "host-ca_ed25519"))
	if err != nil {
		return err
	}
	knownHosts := cfg.path("keys", "known_hosts")
	if err := simvm.WriteKnownHostsCA(knownHosts, hostCA.PublicKey(), cfg.SSHPort); err != nil {
		return err
	}
	emulatorSecret, err := loadOrCreateSecret(cfg.path("keys", "emulator-secret-key"), 24)
	if err != nil {
		return err
	}
	ecsSecret, err := loadOrCreateSecret(cfg.path("keys", "ecs-emulator-secret-key"), 24)
	if err != nil {
		return err
	}
	// The cloud adapter reads both accounts' keys as a mounted Secret:
	// <account>/secretId and secretKey (the RAM AccessKey id and secret
	// for the Alibaba account).
	credDir := cfg.path("credentials")
	for account, key := range map[string][2]string{devAccount: {emulatorSecretID, emulatorSecret}, alibabaAccount: {ecsAccessKeyID, ecsSecret}} {
		if err := writeFileAtomic(filepath.Join(credDir, account, "secretId"), []byte(key[0]), 0o600); err != nil {
			return err
		}
		if err := writeFileAtomic(filepath.Join(credDir, account, "secretKey"), []byte(key[1]), 0o600); err != nil {
			return err
		}
	}
	// The sealing key ring: the gateway seals credentials, hook env values
	// and secret parameters written through the admin API with it,
	// lifecycle seals the configuration file's; the cloud adapter opens
	// credentials and secret parameters, the hook runner hook env values.
	secretsKeyFile := cfg.path("keys", "secrets.key")
	if _, err := sealed.GenerateKeyFile(secretsKeyFile); err != nil {
		return err
	}
	adminToken := cfg.AdminToken
	if adminToken == "" {
		adminToken = os.Getenv("ADMIN_TOKEN")
	}
	if adminToken == "" {
		if adminToken, err = loadOrCreateSecret(cfg.path("keys", "admin-token"), 16); err != nil {
			return err
		}
	}

	// A real kube-apiserver for lifecycle and the VMs' Nodes.
	var kube *kubeStack
	if cfg.Kube {
		if kube, err = startKube(ctx, cfg, log.With("component", "kube")); err != nil {
			return err
		}
		defer kube.stopAPIServer()
	}

	// NATS JetStream with file storage: the services' only shared medium.
	// Each service has its own NATS identity (an NKey generated afresh at
	// every start) with production's permissions; nothing else connects.
	natsKeys, err := natsauth.GenerateKeys()
	if err != nil {
		return err
	}
	natsUsers, err := natsauth.ServerUsers(natsKeys.PublicKeys())
	if err != nil {
		return err
	}
	if natsUsersHook != nil {
		natsUsers = natsUsersHook(natsUsers)
	}
	ns, err := natsembed.Start(natsembed.Options{Port: cfg.NATSPort, StoreDir: cfg.path("nats"), Users: natsUsers})
	if err != nil {
		return err
	}
	defer ns.Shutdown()

	// The simulated world: a cluster, VMs that accept SSH, the CVM API.
	cluster := simcluster.New(simcluster.Options{ReadyDelay: cfg.ReadyDelay, Logger: log.With("component", "simcluster")})
	defer cluster.Close()
	vmCfg := simvm.DefaultConfig()
	vmCfg.Root = cfg.path("vms")
	vmCfg.Persistent = true
	vmCfg.Port = cfg.SSHPort
	vmCfg.AuthorizedKeys = []ssh.PublicKey{clientKey.PublicKey()}
	vmCfg.HostCA = hostCA
	vmCfg.Logger = log.With("component", "simvm")
	vms, err := simvm.NewFactory(vmCfg)
	if err != nil {
		return err
	}
	defer vms.Close()
	emuCfg := cvmemu.DefaultConfig()
	emuCfg.Credentials = map[string]string{emulatorSecretID: emulatorSecret, ecsAccessKeyID: ecsSecret}
	emuCfg.Accounts = map[string]string{emulatorSecretID: devAccount, ecsAccessKeyID: alibabaAccount}
	for _, k := range cfg.EmulatorKeys {
		emuCfg.Credentials[k.SecretID] = k.SecretKey
		emuCfg.Accounts[k.SecretID] = k.Account
	}
	emuCfg.BootDelay = cfg.BootDelay
	emuCfg.StateFile = cfg.path("emulator-state.json")
	emuCfg.Logger = log.With("component", "cvmemu")
	emuOpts := []cvmemu.Option{cvmemu.WithSSH(vms), cvmemu.WithCluster(cluster)}
	if kube != nil {
		// The hooks' `kubectl drain` cordons and evicts through the API
		// server, as the real kubectl does.
		emuOpts = append(emuOpts, cvmemu.WithDrain(kubesim.NewDrainer(kube.client, log.With("component", "kubectl")).Drain))
	}
	emu, err := cvmemu.Start(cfg.EmulatorAddr, emuCfg, emuOpts...)
	if err != nil {
		return err
	}
	defer emu.Close()
	// The same emulator's ECS API: one simulated world (VMs, SSH, cluster
	// joins, state file), two clouds.
	// emu.Close stops it too.
	ecsEndpoint, err := emu.ServeECS(cfg.ECSEmulatorAddr)
	if err != nil {
		return fmt.Errorf("ECS emulator: %w", err)
	}
	metadataEndpoint, err := emu.ServeMetadata(cfg.MetadataAddr)
	if err != nil {
		return fmt.Errorf("metadata service: %w", err)
	}
	adminEndpoint, err := emu.ServeAdmin(cfg.EmulatorAdminAddr)
	if err != nil {
		return fmt.Errorf("emulator admin API: %w", err)
	}
	if emulatorHook != nil {
		emulatorHook(emu)
	}
	if kube != nil {
		// The simulated cluster is only the VMs' kubelets now: the
		// stand-ins make their joins and readiness Nodes in the API server.
		kube.runKubelets(ctx, cluster, kubesim.EmulatorMachines(emu), log.With("component", "kubelets"))
		defer kube.stopKubelets()
	}

	// The four services, each with its own NATS connection, metrics and
	// readiness, exactly as they would run in their own pods.
	natsURL := ns.ClientURL()
	comps := map[string]*component{}
	for _, n := range []string{"lifecycle", "api-gateway", "cloud-adapter", "hook-runner"} {
		comps[n] = newComponent(n)
	}
	if componentsHook != nil {
		componentsHook(comps)
	}

	lc := lifecycle.DefaultConfig()
	lc.NATS = natsKeys.ConnOptions(natsauth.Lifecycle, natsconn.Options{URL: natsURL})
	lc.HealthAddr = ""
	if cfg.ConfigFile != "" {
		lc.ConfigFile = cfg.ConfigFile
	} else {
		lc.ConfigData = nodeGroups
	}
	lc.SecretsKeyFile = secretsKeyFile
	lcDeps := lifecycle.Deps{Cluster: SimCluster{C: cluster}}
	if kube != nil {
		kube.lifecycleConfig(&lc)
		lcDeps.Cluster = nil // its client-go adapter, as in production
	}

	ca := cloudadapter.DefaultConfig()
	ca.NATS = natsKeys.ConnOptions(natsauth.CloudAdapter, natsconn.Options{URL: natsURL})
	ca.HealthAddr = ""
	ca.TencentEndpoint = emu.Endpoint()
	ca.TencentScheme = "http"
	ca.AlibabaEndpoint = ecsEndpoint
	ca.AlibabaScheme = "http"
	ca.CredentialsDir = credDir
	ca.SecretsKeyFile = secretsKeyFile
	ca.WatchPollInterval = time.Second
	if cfg.OfferingUnavailableTTL > 0 {
		ca.OfferingUnavailableTTL = cfg.OfferingUnavailableTTL
	}

	hr := hookrunner.DefaultConfig()
	hr.NATS = natsKeys.ConnOptions(natsauth.HookRunner, natsconn.Options{URL: natsURL})
	hr.HealthAddr = ""
	hr.SSH.KeyFile = cfg.path("keys", "hook-runner_ed25519")
	hr.SSH.KnownHostsFiles = []string{knownHosts}
	hr.SSH.Port = cfg.SSHPort
	hr.SecretsKeyFile = secretsKeyFile

	gw := gateway.DefaultConfig()
	gw.NATS = natsKeys.ConnOptions(natsauth.APIGateway, natsconn.Options{URL: natsURL})
	gw.HealthAddr = ""
	gw.GRPCAddr, gw.RESTAddr = cfg.GRPCAddr, cfg.RESTAddr
	gw.GRPCInsecure = true // the embedded stack only: loopback, no certificates
	gw.RESTInsecure = true // likewise: plaintext REST on loopback
	gw.AdminTokens = []string{adminToken}
	gw.SecretsKeyFile = secretsKeyFile

	ops, err := serveOps(ctx, cfg.OpsAddr, []*component{comps["lifecycle"], comps["api-gateway"], comps["cloud-adapter"], comps["hook-runner"]}, log)
	if err != nil {
		return err
	}
	defer ops.Stop()

	g, gctx := run.NewGroup(ctx)
	deps := func(name string) (*slog.Logger, *component) { return log.With("service", name), comps[name] }
	g.Go("lifecycle", func(ctx context.Context) error {
		l, c := deps("lifecycle")
		d := lcDeps
		d.Logger, d.Registry, d.Health = l, c.registry, c.checks
		return lifecycle.Run(ctx, lc, d)
	})
	g.Go("cloud-adapter", func(ctx context.Context) error {
		l, c := deps("cloud-adapter")
		return cloudadapter.Run(ctx, ca, cloudadapter.Deps{Logger: l, Registry: c.registry, Health: c.checks})
	})
	g.Go("hook-runner", func(ctx context.Context) error {
		l, c := deps("hook-runner")
		return hookrunner.Run(ctx, hr, hookrunner.Deps{Logger: l, Registry: c.registry, Health: c.checks})
	})
	g.Go("api-gateway", func(ctx context.Context) error {
		l, c := deps("api-gateway")
		return gateway.Run(ctx, gw, gateway.Deps{Logger: l, Registry: c.registry, Health: c.checks, OnReady: func(a gateway.Addrs) {
			var kubeInfo *Kube
			if kube != nil {
				if err := kube.writeCloudConfig(a.GRPC); err != nil {
					log.Error("writing Cluster Autoscaler's cloud-config", "err", err)
				}
				k := kube.Kube
				kubeInfo = &k
			}
			if onReady == nil {
				return
			}
			// Announce only when every service is ready, so the banner's
			// examples work the moment it appears.
			go func() {
				if waitReady(ctx, comps) {
					onReady(Addrs{GRPC: a.GRPC, REST: a.REST, Ops: ops.Addr, NATS: natsURL, Emulator: emu.Endpoint(), ECSEmulator: ecsEndpoint, Metadata: metadataEndpoint, EmulatorAdmin: adminEndpoint, AdminToken: adminToken, Kube: kubeInfo})
				}
			}()
		}})
	})
	err = g.Wait()
	if gctx.Err() != nil && ctx.Err() != nil {
		log.Info("stopping simulators and NATS")
	}
	return err
}

// PrintBanner writes what runs where and copy-paste examples.
func PrintBanner(w io.Writer, a Addrs, dataDir string) {
	grpcHost := a.GRPC
	if h, p, err := net.SplitHostPort(a.GRPC); err == nil && (h == "" || h == "::") {
		grpcHost = net.JoinHostPort("127.0.0.1", p)
	}
	rest := "http://" + a.REST
	fmt.Fprintf(w, `
nodesmith is running (embedded). State: %s (delete it, or make clean, to start over).

  externalgrpc (Cluster Autoscaler)  %s   plaintext, this embedded stack only
  REST admin API                     %s/api/v1   bearer token: %s
  status page                        %s/ui/#token=%s
  metrics, livez, readyz             http://%s/metrics
  NATS JetStream                     %s
  Tencent CVM emulator               http://%s
  Alibaba Cloud ECS emulator         http://%s   (the same simulated world)
  VM metadata (spot notices)         %s/<instance-id>/latest/meta-data/
  emulator admin (stock-outs, spot)  %s/stockouts, %s/reclaim
  node groups                        "workers" on Tencent Cloud, "ecs-workers" on Alibaba Cloud
                                     (min 0, max 20 each), VMs answer SSH on 127.77.x.y

Try it (grpcurl: make tools, then bin/grpcurl):

  bin/grpcurl -plaintext -import-path proto -proto externalgrpc/externalgrpc.proto \
    -d '{"id":"workers","delta":3}' %s \
    clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/NodeGroupIncreaseSize

  bin/grpcurl -plaintext -import-path proto -proto externalgrpc/externalgrpc.proto \
    -d '{"id":"ecs-workers","delta":2}' %s \
    clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/NodeGroupIncreaseSize

  bin/grpcurl -plaintext -import-path proto -proto externalgrpc/externalgrpc.proto \
    -d '{"id":"workers"}' %s \
    clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/NodeGroupNodes

  curl -s -H "Authorization: Bearer %s" %s/api/v1/nodegroups
  curl -s -H "Authorization: Bearer %s" "%s/api/v1/instances?group=workers"
  curl -s http://%s/readyz
`, dataDir, grpcHost, rest, a.AdminToken, rest, a.AdminToken, a.Ops, a.NATS, a.Emulator, a.ECSEmulator, a.Metadata, a.EmulatorAdmin, a.EmulatorAdmin, grpcHost, grpcHost, grpcHost, a.AdminToken, rest, a.AdminToken, rest, a.Ops)
	if a.Kube != nil {
		printKubeBanner(w, *a.Kube)
	}
	fmt.Fprint(w, "\nCtrl-C stops everything cleanly.\n")
}

// printKubeBanner tells how to point a Cluster Autoscaler at the stack.
func printKubeBanner(w io.Writer, k Kube) {
	fmt.Fprintf(w, `
Kubernetes (--kube): lifecycle watches Nodes and holds its Lease in this API server; the VMs'
kubelets register their Nodes in it. No scheduler, controller-manager or real kubelet runs.

  kube-apiserver                     %s
  kubeconfig (admin)                 %s
  CA cloud-config (externalgrpc)     %s

A Cluster Autoscaler binary against this stack:

  %s

Then pending pods -> CA -> nodesmith -> Nodes:

  export KUBECONFIG=%s
  kubectl apply -f %s   # 3 Pods, each needing a node
  kubectl get nodes -L node.kubernetes.io/instance-type,topology.kubernetes.io/zone -w
  kubectl delete -f %s  # CA removes the empty nodes
`, k.APIServer, k.Kubeconfig, k.CloudConfig, strings.Join(ClusterAutoscalerArgs(k), " \\\n    "), k.Kubeconfig, k.DemoPods, k.DemoPods)
}
