package service

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/config"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsconn"
)

// Environment variables holding SSH secrets as values (rather than files).
// They are read by Config.ReadSecretEnv, never by flags, so a secret never
// appears on a command line or in flag usage output.
const (
	EnvSSHPassword      = "NODESMITH_SSH_PASSWORD"
	EnvSSHPrivateKey    = "NODESMITH_SSH_PRIVATE_KEY"
	EnvSSHKeyPassphrase = "NODESMITH_SSH_KEY_PASSPHRASE"
)

// Config configures the hook runner. Start from DefaultConfig.
type Config struct {
	// NATS is the connection used when Deps.Conn is nil.
	NATS natsconn.Options
	// Topology are the --js-* options. Lifecycle alone ensures the
	// topology with them; the hook runner waits for its consumer (whose
	// ack wait sets its heartbeat) and accepts the flags only so one
	// shared environment configures every service.
	Topology messaging.Options
	// HealthAddr serves /livez, /readyz and /metrics; empty disables it.
	HealthAddr string
	// RunnerID names this replica in results; empty means the host name
	// (the pod name in Kubernetes).
	RunnerID string
	// Concurrency is the number of hooks this replica runs at once.
	Concurrency int
	// ShutdownGrace is how long running hooks may continue after SIGTERM;
	// those still running then are killed and handed to another replica.
	// Keep the pod's terminationGracePeriodSeconds above it.
	ShutdownGrace time.Duration
	// HookTimeout applies to hooks whose command has no timeout.
	HookTimeout time.Duration
	SSH         SSHConfig
	// SecretsKeyFile is the sealing key ring (libs/sealed) that opens the
	// hook environment values lifecycle and the gateway sealed. Empty: a
	// hook with sealed values fails (FailureInvalid).
	SecretsKeyFile string
}

// SSHConfig configures how hooks reach VMs.
type SSHConfig struct {
	// User to log in as.
	User string
	// KeyFile is a private key; KeyPassphraseFile holds its passphrase.
	KeyFile           string
	KeyPassphraseFile string
	// PasswordFile holds the login password.
	PasswordFile string
	// PrivateKey, KeyPassphrase and Password are the same secrets as
	// values (from the environment or an embedding process). A file, when
	// also given, wins.
	PrivateKey    Secret
	KeyPassphrase Secret
	Password      Secret
	// KnownHostsFiles are OpenSSH known_hosts files (plain keys,
	// @cert-authority and @revoked lines).
	KnownHostsFiles []string
	// TrustOnFirstUse accepts and reports the key of a host that
	// known_hosts does not know, when the hook carries no pinned key.
	TrustOnFirstUse bool
	// Port is used when a hook has none.
	Port int
	// ConnectTimeout bounds one connection attempt (TCP and handshake).
	ConnectTimeout time.Duration
}

// Secret is a sensitive value. It prints as [redacted] in fmt, slog and
// JSON, so logging a Config cannot leak it.
type Secret string

// String implements fmt.Stringer.
func (Secret) String() string { return "[redacted]" }

// GoString implements fmt.GoStringer.
func (Secret) GoString() string { return `"[redacted]"` }

// LogValue implements slog.LogValuer.
func (Secret) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// MarshalText implements encoding.TextMarshaler.
func (Secret) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }

// DefaultConfig returns the defaults behind the flags.
func DefaultConfig() Config {
	return Config{
		NATS:          natsconn.Options{URL: "nats://127.0.0.1:4222", Name: "hook-runner"},
		Topology:      messaging.DefaultOptions(),
		HealthAddr:    ":8087",
		Concurrency:   50,
		ShutdownGrace: 2 * time.Minute,
		HookTimeout:   15 * time.Minute,
		SSH: SSHConfig{
			User:           "root",
			Port:           22,
			ConnectTimeout: 10 * time.Second,
		},
	}
}

// RegisterFlags binds c to flags (each also read from NODESMITH_<FLAG> by
// libs/config.Parse).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.NATS.RegisterFlags(fs)
	c.Topology.RegisterFlags(fs)
	fs.StringVar(&c.HealthAddr, "health-addr", c.HealthAddr, "address serving /livez, /readyz and /metrics (empty: off)")
	fs.StringVar(&c.RunnerID, "runner-id", c.RunnerID, "name of this replica in hook results (default: the host name, i.e. the pod name)")
	fs.IntVar(&c.Concurrency, "concurrency", c.Concurrency, "hooks this replica runs at once")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", c.ShutdownGrace, "how long running hooks may finish after SIGTERM before they are killed and redelivered")
	fs.StringVar(&c.SecretsKeyFile, "secrets-key-file", c.SecretsKeyFile, "sealing key ring file (one base64 32-byte key per line; the gateway's and lifecycle's) that opens the sealed hook environment values")
	fs.DurationVar(&c.HookTimeout, "hook-timeout", c.HookTimeout, "deadline of a hook whose command sets none (connecting included)")
	fs.StringVar(&c.SSH.User, "ssh-user", c.SSH.User, "user to log in as on VMs")
	fs.StringVar(&c.SSH.KeyFile, "ssh-key-file", c.SSH.KeyFile, "private key file (or set "+EnvSSHPrivateKey+")")
	fs.StringVar(&c.SSH.KeyPassphraseFile, "ssh-key-passphrase-file", c.SSH.KeyPassphraseFile, "file holding the private key's passphrase (or set "+EnvSSHKeyPassphrase+")")
	fs.StringVar(&c.SSH.PasswordFile, "ssh-password-file", c.SSH.PasswordFile, "file holding the login password (or set "+EnvSSHPassword+")")
	fs.Var((*fileList)(&c.SSH.KnownHostsFiles), "ssh-known-hosts", "known_hosts file(s) verifying VM host keys, incl. @cert-authority lines; comma separated or repeated")
	fs.BoolVar(&c.SSH.TrustOnFirstUse, "ssh-trust-on-first-use", c.SSH.TrustOnFirstUse, "accept the host key of a VM that known_hosts does not know at first contact and report it for pinning")
	fs.IntVar(&c.SSH.Port, "ssh-port", c.SSH.Port, "SSH port of VMs when a hook names none")
	fs.DurationVar(&c.SSH.ConnectTimeout, "ssh-connect-timeout", c.SSH.ConnectTimeout, "bound of one connection attempt (TCP connect and SSH handshake); attempts repeat until the hook's deadline")
	config.AcceptEnv(fs, EnvSSHPassword, EnvSSHPrivateKey, EnvSSHKeyPassphrase)
}

// ReadSecretEnv fills the secret values from their environment variables
// (looked up with lookup).
func (c *Config) ReadSecretEnv(lookup func(string) (string, bool)) {
	if v, ok := lookup(EnvSSHPassword); ok && v != "" {
		c.SSH.Password = Secret(v)
	}
	if v, ok := lookup(EnvSSHPrivateKey); ok && v != "" {
		c.SSH.PrivateKey = Secret(v)
	}
	if v, ok := lookup(EnvSSHKeyPassphrase); ok && v != "" {
		c.SSH.KeyPassphrase = Secret(v)
	}
}

// Validate reports every invalid setting.
func (c Config) Validate() error {
	var errs []error
	if err := c.Topology.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("topology: %w", err))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("concurrency must be at least 1, got %d", c.Concurrency))
	}
	if c.ShutdownGrace <= 0 {
		errs = append(errs, errors.New("shutdown grace must be positive"))
	}
	if c.HookTimeout <= 0 {
		errs = append(errs, errors.New("hook timeout must be positive"))
	}
	s := c.SSH
	if strings.TrimSpace(s.User) == "" {
		errs = append(errs, errors.New("ssh user is empty"))
	}
	if s.Port < 1 || s.Port > 65535 {
		errs = append(errs, fmt.Errorf("ssh port must be 1..65535, got %d", s.Port))
	}
	if s.ConnectTimeout <= 0 {
		errs = append(errs, errors.New("ssh connect timeout must be positive"))
	}
	hasKey := s.KeyFile != "" || s.PrivateKey != ""
	if !hasKey && s.PasswordFile == "" && s.Password == "" {
		errs = append(errs, fmt.Errorf("no ssh credentials: set --ssh-key-file, --ssh-password-file, %s or %s", EnvSSHPrivateKey, EnvSSHPassword))
	}
	if !hasKey && (s.KeyPassphraseFile != "" || s.KeyPassphrase != "") {
		errs = append(errs, errors.New("an ssh key passphrase is set but no private key"))
	}
	if len(s.KnownHostsFiles) == 0 && !s.TrustOnFirstUse {
		errs = append(errs, errors.New("no way to verify VM host keys: set --ssh-known-hosts or --ssh-trust-on-first-use"))
	}
	return errors.Join(errs...)
}

// fileList is a flag.Value of comma-separated paths; repeating the flag adds more.
type fileList []string

func (l *fileList) String() string { return strings.Join(*l, ",") }

func (l *fileList) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}
