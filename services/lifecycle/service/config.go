package service

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsconn"
	kube "github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/kubernetes"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/yamlconfig"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// DefaultLocalClusterID is the cluster id without Kubernetes when none is
// given: the embedded stack and no-cluster mode.
const DefaultLocalClusterID = "nodesmith"

// Values of Config.Cluster.
const (
	ClusterKubernetes = "kubernetes"
	ClusterNone       = "none"
)

// Config configures the lifecycle service. Start from DefaultConfig.
type Config struct {
	// NATS is the connection used when Deps.Conn is nil.
	NATS natsconn.Options
	// Topology is ensured at start (messaging.Ensure).
	Topology messaging.Options

	// ConfigFile is the YAML file of accounts, instance templates and node
	// groups (see the README for the schema). Empty: no file; groups come
	// only from the admin API. Relative hook files are resolved against its
	// directory.
	ConfigFile string
	// ConfigData, when non-nil, is the configuration itself (the embedded
	// launcher's built-in default); it is used instead of reading
	// ConfigFile, whose name then only labels errors and anchors relative
	// hook files. ConfigData is never reloaded.
	ConfigData []byte
	// ConfigReloadInterval is how often ConfigFile is checked for changes
	// (content hash, so a ConfigMap's atomic symlink swap is seen); 0
	// disables hot reload.
	ConfigReloadInterval time.Duration
	// SecretsKeyFile is the sealing key ring (libs/sealed: one base64
	// 32-byte key per line, the first seals) shared with the gateway, the
	// cloud adapters and the hook runners. Lifecycle seals the hook
	// environment values and secret parameters of ConfigFile with it and
	// re-seals stored values under the newest key. Empty: the file must
	// hold no such value.
	SecretsKeyFile string

	// ClusterID tags every VM created (the reconciler lists VMs by it, the
	// cloud adapter terminates only VMs carrying it); it must be unique per
	// Kubernetes cluster sharing a cloud account. Empty: with Kubernetes,
	// "k8s-" and the uid of the cluster's kube-system namespace; without,
	// DefaultLocalClusterID (make run, tests). An install whose VMs carry
	// an id must keep it (see the README's upgrade notes).
	ClusterID string
	// HealthAddr serves /livez, /readyz and /metrics; empty: not served
	// (the embedded launcher serves one combined endpoint).
	HealthAddr string

	// Cluster selects the Kubernetes cluster the instances join:
	// "kubernetes" (client-go), "none" (no-cluster mode: instances are
	// Running once their after_created hook succeeded), or "" (auto:
	// kubernetes when running in a pod or Kubeconfig is set; otherwise
	// start-up fails, so no-cluster mode is always a deliberate choice).
	// Deps.Cluster, when set, is the cluster whatever this says; auto then
	// uses no Kubernetes client.
	Cluster string
	// Kubeconfig is a kubeconfig file; empty means the in-cluster
	// configuration.
	Kubeconfig string
	// KubeQPS and KubeBurst bound the Kubernetes client's request rate.
	KubeQPS   float64
	KubeBurst int
	// Namespace holds the Lease, the status ConfigMap and the Events;
	// empty means the pod's namespace (its service account's), else
	// kube-system.
	Namespace string
	// LeaderElect runs leader election on a Lease (with a Kubernetes
	// client; without one, this process always leads). Deps.Leader, when
	// set, replaces it.
	LeaderElect bool
	// LeaseName names the Lease.
	LeaseName string
	// LeaderElectIdentity names this process in the Lease; empty means the
	// pod name (POD_NAME) or host name plus a random suffix.
	LeaderElectIdentity string
	// LeaderElectLeaseDuration, LeaderElectRenewDeadline and
	// LeaderElectRetryPeriod tune leader election (client-go's meaning).
	LeaderElectLeaseDuration time.Duration
	LeaderElectRenewDeadline time.Duration
	LeaderElectRetryPeriod   time.Duration
	// KubeEvents records instance transitions as Events on their Nodes.
	KubeEvents bool
	// StatusConfigMap names the ConfigMap the leader writes a summary of
	// the node groups to (empty disables it); StatusInterval is how often
	// it is written when it changed.
	StatusConfigMap string
	StatusInterval  time.Duration

	// CreateParallelism and DeleteParallelism are the per-group defaults of
	// in-flight creations (Creating) and deletions (PendingDeletion with its
	// hook started, Deleting); groups override them with parallelism.
	CreateParallelism int
	DeleteParallelism int
	// AccountCreateParallelism and AccountDeleteParallelism cap in-flight
	// work per cloud account across all its groups.
	AccountCreateParallelism int
	AccountDeleteParallelism int
	// CreateLinger is how long Pending instances may wait for a fuller
	// create batch while their group's creations finish one by one.
	CreateLinger time.Duration

	// Deadlines of the waiting states.
	LaunchTimeout           time.Duration
	AfterCreatedHookTimeout time.Duration
	JoinTimeout             time.Duration
	BeforeDeleteHookTimeout time.Duration
	TerminateTimeout        time.Duration
	// NodeDeletedGrace is how long a Running instance whose Node was
	// deleted by someone else waits for it to register again before the
	// instance is replaced (0: at once).
	NodeDeletedGrace time.Duration
	// MaxRetries bounds retries of a retryable failure of one step
	// (terminations are retried without bound).
	MaxRetries int
	// RetryBackoff and RetryBackoffMax shape the exponential backoff
	// (+/-20% jitter) between retries.
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration

	// DeletedRetention is how long Deleted records are kept before purging.
	DeletedRetention time.Duration
	// PurgeInterval is how often Deleted records past the retention are
	// looked for (a backlog is drained pass after pass, not per interval).
	PurgeInterval time.Duration
	// ReconcileInterval is how often the cloud inventory is reconciled with
	// the records (0 disables); OrphanGrace is how old an untracked tagged
	// VM must be before it is terminated.
	ReconcileInterval time.Duration
	OrphanGrace       time.Duration
	// MaxOrphanTerminations caps the orphan VMs one reconciler pass
	// terminates per account and region (0: none, orphans are only
	// reported); EmptyStartOrphanHold is the start-up hold: after a start
	// with no instance records, orphans created before it are only
	// reported this long unless an operator releases them (0 disables).
	MaxOrphanTerminations int
	EmptyStartOrphanHold  time.Duration

	// TickInterval is how often the dispatcher checks deadlines and
	// retries when nothing wakes it.
	TickInterval time.Duration
	// EventConcurrency is how many worker results are handled at once.
	EventConcurrency int
	// OpTimeout bounds one lifecycle operation (request/reply).
	OpTimeout time.Duration
	// ShutdownGrace bounds the wait for in-flight work at shutdown.
	ShutdownGrace time.Duration
	// RequestIDTTL is how long an operation's outcome answers repeats of
	// its request id (at-most-once operations); 0 disables it.
	// RequestIDMax bounds the remembered ids.
	RequestIDTTL time.Duration
	RequestIDMax int
}

// DefaultConfig returns the production defaults.
func DefaultConfig() Config {
	p := domain.DefaultPolicy()
	o := app.DefaultOptions()
	lo := kube.DefaultLeaderOptions()
	return Config{
		NATS:                     natsconn.Options{URL: "nats://127.0.0.1:4222", Name: "lifecycle"},
		Topology:                 messaging.DefaultOptions(),
		ConfigReloadInterval:     5 * time.Second,
		HealthAddr:               ":8087",
		KubeQPS:                  20,
		KubeBurst:                40,
		LeaderElect:              true,
		LeaseName:                lo.Name,
		LeaderElectLeaseDuration: lo.LeaseDuration,
		LeaderElectRenewDeadline: lo.RenewDeadline,
		LeaderElectRetryPeriod:   lo.RetryPeriod,
		KubeEvents:               true,
		StatusConfigMap:          "nodegroup-status",
		StatusInterval:           o.StatusInterval,
		CreateParallelism:        o.CreateParallelism,
		DeleteParallelism:        o.DeleteParallelism,
		AccountCreateParallelism: o.AccountCreateParallelism,
		AccountDeleteParallelism: o.AccountDeleteParallelism,
		CreateLinger:             o.CreateLinger,
		LaunchTimeout:            p.LaunchTimeout,
		AfterCreatedHookTimeout:  p.AfterCreatedHookTimeout,
		JoinTimeout:              p.JoinTimeout,
		BeforeDeleteHookTimeout:  p.BeforeDeleteHookTimeout,
		TerminateTimeout:         p.TerminateTimeout,
		NodeDeletedGrace:         p.NodeDeletedGrace,
		MaxRetries:               p.MaxRetries,
		RetryBackoff:             p.BackoffBase,
		RetryBackoffMax:          p.BackoffMax,
		DeletedRetention:         o.DeletedRetention,
		PurgeInterval:            o.PurgeInterval,
		ReconcileInterval:        o.ReconcileInterval,
		OrphanGrace:              o.OrphanGrace,
		MaxOrphanTerminations:    o.MaxOrphanTerminations,
		EmptyStartOrphanHold:     o.EmptyStartOrphanHold,
		TickInterval:             o.TickInterval,
		EventConcurrency:         16,
		OpTimeout:                15 * time.Second,
		ShutdownGrace:            20 * time.Second,
		RequestIDTTL:             o.RequestTTL,
		RequestIDMax:             o.RequestLogSize,
	}
}

// RegisterFlags binds every field to a flag (and so, through
// libs/config.Parse, to NODESMITH_<FLAG> environment variables).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.NATS.RegisterFlags(fs)
	c.Topology.RegisterFlags(fs)
	fs.StringVar(&c.ConfigFile, "config-file", c.ConfigFile, "YAML file of accounts, instance templates and node groups")
	fs.StringVar(&c.SecretsKeyFile, "secrets-key-file", c.SecretsKeyFile, "sealing key ring file (one base64 32-byte key per line, the first seals; `make secrets` writes one): seals the config file's hook env values and secretParameters and re-seals stored ones under the newest key")
	fs.DurationVar(&c.ConfigReloadInterval, "config-reload-interval", c.ConfigReloadInterval, "how often the config file is checked for changes (0 disables hot reload)")
	fs.StringVar(&c.ClusterID, "cluster-id", c.ClusterID, "id tagged on every VM created (the reconciler and terminations act only on VMs carrying it); unique per cluster sharing a cloud account. Empty: k8s-<uid of kube-system> with Kubernetes, else "+DefaultLocalClusterID+". Keep the id an install's VMs already carry")
	fs.StringVar(&c.HealthAddr, "health-addr", c.HealthAddr, "address of /livez, /readyz and /metrics (empty disables)")
	fs.StringVar(&c.Cluster, "cluster", c.Cluster, `the cluster instances join: "kubernetes", "none" (no-cluster mode), or empty: kubernetes in a pod or with --kubeconfig, else an error`)
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "kubeconfig file (empty: the in-cluster configuration)")
	fs.Float64Var(&c.KubeQPS, "kube-api-qps", c.KubeQPS, "Kubernetes API requests per second")
	fs.IntVar(&c.KubeBurst, "kube-api-burst", c.KubeBurst, "Kubernetes API request burst")
	fs.StringVar(&c.Namespace, "namespace", c.Namespace, "namespace of the Lease, the status ConfigMap and the Events (empty: the pod's, else kube-system)")
	fs.BoolVar(&c.LeaderElect, "leader-elect", c.LeaderElect, "elect a leader on a Lease (with Kubernetes); only the leader writes state")
	fs.StringVar(&c.LeaseName, "lease-name", c.LeaseName, "name of the leader election Lease")
	fs.StringVar(&c.LeaderElectIdentity, "leader-elect-identity", c.LeaderElectIdentity, "identity in the Lease (empty: POD_NAME or the host name, plus a random suffix)")
	fs.DurationVar(&c.LeaderElectLeaseDuration, "leader-elect-lease-duration", c.LeaderElectLeaseDuration, "how long followers wait after the last renewal before taking over")
	fs.DurationVar(&c.LeaderElectRenewDeadline, "leader-elect-renew-deadline", c.LeaderElectRenewDeadline, "how long the leader tries to renew before stepping down")
	fs.DurationVar(&c.LeaderElectRetryPeriod, "leader-elect-retry-period", c.LeaderElectRetryPeriod, "how often leader election is tried")
	fs.BoolVar(&c.KubeEvents, "kube-events", c.KubeEvents, "record instance transitions as Events on their Nodes")
	fs.StringVar(&c.StatusConfigMap, "status-configmap", c.StatusConfigMap, "ConfigMap the leader writes the node group summary to (empty disables)")
	fs.DurationVar(&c.StatusInterval, "status-interval", c.StatusInterval, "how often the status ConfigMap is written when it changed")
	fs.IntVar(&c.CreateParallelism, "create-parallelism", c.CreateParallelism, "default in-flight creations per node group")
	fs.IntVar(&c.DeleteParallelism, "delete-parallelism", c.DeleteParallelism, "default in-flight deletions per node group")
	fs.IntVar(&c.AccountCreateParallelism, "account-create-parallelism", c.AccountCreateParallelism, "in-flight creations per cloud account")
	fs.DurationVar(&c.CreateLinger, "create-linger", c.CreateLinger, "how long Pending instances may wait for a fuller create batch while their group's creations finish one by one (0: batch at once)")
	fs.IntVar(&c.AccountDeleteParallelism, "account-delete-parallelism", c.AccountDeleteParallelism, "in-flight deletions per cloud account")
	fs.DurationVar(&c.LaunchTimeout, "launch-timeout", c.LaunchTimeout, "deadline from the create call to a RUNNING VM with an IP")
	fs.DurationVar(&c.AfterCreatedHookTimeout, "after-created-hook-timeout", c.AfterCreatedHookTimeout, "deadline for an after_created hook result")
	fs.DurationVar(&c.JoinTimeout, "join-timeout", c.JoinTimeout, "deadline from the after_created hook's success to a Ready node")
	fs.DurationVar(&c.BeforeDeleteHookTimeout, "before-delete-hook-timeout", c.BeforeDeleteHookTimeout, "deadline for a before_delete hook result")
	fs.DurationVar(&c.TerminateTimeout, "terminate-timeout", c.TerminateTimeout, "deadline for a terminate result")
	fs.DurationVar(&c.NodeDeletedGrace, "node-deleted-grace", c.NodeDeletedGrace, "how long a Running instance whose Node was deleted by someone else waits for it to register again before it is replaced (0: at once)")
	fs.IntVar(&c.MaxRetries, "max-retries", c.MaxRetries, "retries of a retryable failure of one step")
	fs.DurationVar(&c.RetryBackoff, "retry-backoff", c.RetryBackoff, "first retry delay (doubles per retry, +/-20% jitter)")
	fs.DurationVar(&c.RetryBackoffMax, "retry-backoff-max", c.RetryBackoffMax, "longest retry delay")
	fs.DurationVar(&c.DeletedRetention, "deleted-retention", c.DeletedRetention, "how long Deleted instance records are kept")
	fs.DurationVar(&c.PurgeInterval, "purge-interval", c.PurgeInterval, "how often Deleted records past the retention are looked for (a backlog is then purged pass after pass)")
	fs.DurationVar(&c.ReconcileInterval, "reconcile-interval", c.ReconcileInterval, "how often cloud inventory is reconciled with the records (0 disables)")
	fs.DurationVar(&c.OrphanGrace, "orphan-grace", c.OrphanGrace, "age before an untracked tagged VM is terminated")
	fs.IntVar(&c.MaxOrphanTerminations, "max-orphan-terminations", c.MaxOrphanTerminations, "orphan VMs one reconciler pass terminates at most, per account and region, the oldest first (0: none, only report them)")
	fs.DurationVar(&c.EmptyStartOrphanHold, "empty-start-orphan-hold", c.EmptyStartOrphanHold, "after a start with no instance records, how long orphan VMs created before it are only reported unless an operator releases them (0 disables)")
	fs.DurationVar(&c.TickInterval, "tick-interval", c.TickInterval, "how often deadlines and retries are checked")
	fs.IntVar(&c.EventConcurrency, "event-concurrency", c.EventConcurrency, "worker results handled at once")
	fs.DurationVar(&c.OpTimeout, "op-timeout", c.OpTimeout, "deadline of one lifecycle operation")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", c.ShutdownGrace, "how long shutdown waits for in-flight work")
	fs.DurationVar(&c.RequestIDTTL, "request-id-ttl", c.RequestIDTTL, "how long an operation's outcome answers repeats of its request id (0 disables)")
	fs.IntVar(&c.RequestIDMax, "request-id-max", c.RequestIDMax, "how many request ids are remembered")
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.ClusterID == "" || domain.ValidName(c.ClusterID) == "", "cluster-id %q: %s", c.ClusterID, domain.ValidName(c.ClusterID))
	check(c.CreateParallelism > 0, "create-parallelism must be positive, got %d", c.CreateParallelism)
	check(c.DeleteParallelism > 0, "delete-parallelism must be positive, got %d", c.DeleteParallelism)
	check(c.CreateLinger >= 0, "create-linger must not be negative, got %s", c.CreateLinger)
	check(c.AccountCreateParallelism > 0, "account-create-parallelism must be positive, got %d", c.AccountCreateParallelism)
	check(c.AccountDeleteParallelism > 0, "account-delete-parallelism must be positive, got %d", c.AccountDeleteParallelism)
	for name, d := range map[string]time.Duration{
		"launch-timeout": c.LaunchTimeout, "after-created-hook-timeout": c.AfterCreatedHookTimeout,
		"join-timeout": c.JoinTimeout, "before-delete-hook-timeout": c.BeforeDeleteHookTimeout,
		"terminate-timeout": c.TerminateTimeout, "retry-backoff": c.RetryBackoff, "retry-backoff-max": c.RetryBackoffMax,
		"tick-interval": c.TickInterval, "op-timeout": c.OpTimeout, "shutdown-grace": c.ShutdownGrace,
		"purge-interval": c.PurgeInterval,
	} {
		check(d > 0, "%s must be positive, got %s", name, d)
	}
	check(c.RetryBackoffMax >= c.RetryBackoff, "retry-backoff-max (%s) must not be below retry-backoff (%s)", c.RetryBackoffMax, c.RetryBackoff)
	check(c.MaxRetries >= 0, "max-retries must not be negative, got %d", c.MaxRetries)
	check(c.NodeDeletedGrace >= 0, "node-deleted-grace must not be negative, got %s", c.NodeDeletedGrace)
	check(c.DeletedRetention >= 0, "deleted-retention must not be negative")
	check(c.ReconcileInterval >= 0, "reconcile-interval must not be negative")
	check(c.OrphanGrace >= 0, "orphan-grace must not be negative")
	check(c.MaxOrphanTerminations >= 0, "max-orphan-terminations must not be negative, got %d", c.MaxOrphanTerminations)
	check(c.EmptyStartOrphanHold >= 0, "empty-start-orphan-hold must not be negative")
	check(c.ConfigReloadInterval >= 0, "config-reload-interval must not be negative")
	check(c.EventConcurrency > 0, "event-concurrency must be positive, got %d", c.EventConcurrency)
	check(c.Cluster == "" || c.Cluster == ClusterNone || c.Cluster == ClusterKubernetes,
		"cluster must be %q, %q or empty (auto), got %q", ClusterKubernetes, ClusterNone, c.Cluster)
	check(c.KubeQPS > 0 && c.KubeBurst > 0, "kube-api-qps and kube-api-burst must be positive")
	check(c.StatusInterval > 0, "status-interval must be positive, got %s", c.StatusInterval)
	if c.LeaderElect {
		lo := kube.LeaderOptions{Namespace: "ns", Name: c.LeaseName, Identity: "id",
			LeaseDuration: c.LeaderElectLeaseDuration, RenewDeadline: c.LeaderElectRenewDeadline, RetryPeriod: c.LeaderElectRetryPeriod}
		if err := lo.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	check(c.RequestIDTTL >= 0, "request-id-ttl must not be negative")
	check(c.RequestIDMax > 0, "request-id-max must be positive, got %d", c.RequestIDMax)
	if err := c.Topology.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("topology: %w", err))
	}
	return errors.Join(errs...)
}

func (c Config) policy() domain.Policy {
	p := domain.DefaultPolicy()
	p.LaunchTimeout = c.LaunchTimeout
	p.AfterCreatedHookTimeout = c.AfterCreatedHookTimeout
	p.JoinTimeout = c.JoinTimeout
	p.BeforeDeleteHookTimeout = c.BeforeDeleteHookTimeout
	p.TerminateTimeout = c.TerminateTimeout
	p.NodeDeletedGrace = c.NodeDeletedGrace
	p.MaxRetries = c.MaxRetries
	p.BackoffBase = c.RetryBackoff
	p.BackoffMax = c.RetryBackoffMax
	return p
}

func (c Config) appOptions() app.Options {
	o := app.DefaultOptions()
	o.Policy = c.policy()
	o.ClusterID = c.ClusterID
	o.CreateParallelism = c.CreateParallelism
	o.DeleteParallelism = c.DeleteParallelism
	o.AccountCreateParallelism = c.AccountCreateParallelism
	o.AccountDeleteParallelism = c.AccountDeleteParallelism
	o.CreateLinger = c.CreateLinger
	o.TickInterval = c.TickInterval
	o.DeletedRetention = c.DeletedRetention
	o.PurgeInterval = c.PurgeInterval
	o.ReconcileInterval = c.ReconcileInterval
	o.OrphanGrace = c.OrphanGrace
	o.MaxOrphanTerminations = c.MaxOrphanTerminations
	o.EmptyStartOrphanHold = c.EmptyStartOrphanHold
	o.StatusInterval = c.StatusInterval
	o.RequestTTL = c.RequestIDTTL
	o.RequestLogSize = c.RequestIDMax
	return o
}

// ValidateConfigData checks a configuration given as bytes and returns
// every problem (an error naming name, each field path and line). baseDir
// resolves relative hook files ("" = the working directory).
func ValidateConfigData(name string, data []byte, baseDir string) error {
	_, err := yamlconfig.Parse(name, data, baseDir)
	return err
}

// ValidateConfigFile checks the configuration file at path.
func ValidateConfigFile(path string) error {
	_, err := CheckConfigFile(path)
	return err
}

// CheckConfigFile checks the configuration file at path and returns its
// warnings (deprecated spellings, with their lines).
func CheckConfigFile(path string) ([]string, error) {
	cfg, err := yamlconfig.Load(path)
	if err != nil {
		return nil, err
	}
	return cfg.Warnings, nil
}

// loadGroups reads the configured groups: ConfigData when set, else
// ConfigFile, else none (nil: the file does not manage any group). It also
// returns the bytes it parsed, so hot reload compares against exactly them.
func (c Config) loadGroups() (*yamlconfig.Config, []byte, error) {
	switch {
	case c.ConfigData != nil:
		name, dir := "<built-in configuration>", ""
		if c.ConfigFile != "" {
			name, dir = c.ConfigFile, filepath.Dir(c.ConfigFile)
		}
		cfg, err := yamlconfig.Parse(name, c.ConfigData, dir)
		return cfg, c.ConfigData, err
	case c.ConfigFile != "":
		data, err := os.ReadFile(c.ConfigFile)
		if err != nil {
			return nil, nil, fmt.Errorf("reading configuration file: %w", err)
		}
		cfg, err := yamlconfig.Parse(c.ConfigFile, data, filepath.Dir(c.ConfigFile))
		return cfg, data, err
	}
	return nil, nil, nil
}
