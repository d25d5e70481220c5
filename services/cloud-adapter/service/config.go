package service

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/config"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsconn"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/alibaba"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/secrets"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/tencent"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/app"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ratelimit"
)

// Config configures the cloud adapter. Start from DefaultConfig.
type Config struct {
	// NATS is the connection used when Deps.Conn is nil.
	NATS natsconn.Options
	// Topology are the --js-* options. Lifecycle alone ensures the
	// topology with them; this service waits for it and uses only
	// CloudAckWait, to check that --heartbeat fits in it. The flags are
	// accepted here so one shared environment configures every service.
	Topology messaging.Options
	// HealthAddr serves /livez, /readyz and /metrics; empty disables it
	// (the embedded launcher serves one combined endpoint).
	HealthAddr string

	// Concurrency is how many commands this replica handles at once
	// (watches hold a slot while they poll).
	Concurrency int
	// Heartbeat is how often a command in progress is marked InProgress;
	// at most a third of Topology.CloudAckWait, so a running command
	// survives one lost beat.
	Heartbeat time.Duration
	// ShutdownGrace is how long in-flight commands may finish after a
	// stop signal before they are cancelled (and redelivered elsewhere).
	ShutdownGrace time.Duration

	// WatchPollInterval is the pause between DescribeInstances rounds once
	// a watch saw no change for WatchFastPollFor; WatchFastPollInterval the
	// pause before that (see app.Options).
	WatchPollInterval     time.Duration
	WatchFastPollInterval time.Duration
	WatchFastPollFor      time.Duration
	// WatchMaxDuration bounds one watch; lifecycle's deadlines cover the rest.
	WatchMaxDuration time.Duration
	// WatchNotFoundGrace is how long a watched VM must stay absent before
	// it is reported NOT_FOUND.
	WatchNotFoundGrace time.Duration

	// CallTimeout bounds one cloud API call.
	CallTimeout time.Duration
	// RetryInitial, RetryMax and RetryAttempts bound the retries of
	// throttled and transient cloud answers inside the adapter.
	RetryInitial  time.Duration
	RetryMax      time.Duration
	RetryAttempts int

	// TencentRateLimits paces CVM calls per (account, region, action):
	// "Action=rate[:burst],...".
	TencentRateLimits string
	// TencentEndpoint overrides the CVM API host ("host:port"), e.g. the
	// emulator's; empty means Tencent Cloud's public endpoint.
	TencentEndpoint string
	// TencentScheme is "https" or "http" (the emulator).
	TencentScheme string

	// AlibabaRateLimits paces ECS calls per (account, region, action):
	// "Action=rate[:burst],...".
	AlibabaRateLimits string
	// AlibabaEndpoint overrides the ECS API host ("host:port"), e.g. the
	// emulator's; empty means the region's public ECS endpoint.
	AlibabaEndpoint string
	// AlibabaScheme is "https" or "http" (the emulator).
	AlibabaScheme string

	// CredentialsDir holds <account>/secretId, <account>/secretKey and
	// optionally <account>/token (a mounted Secret).
	CredentialsDir string
	// CredentialsFile is a YAML or JSON file:
	// accounts: {<account>: {secretId, secretKey, token}}.
	CredentialsFile string
	// CredentialsReloadInterval is how often the files are re-read.
	CredentialsReloadInterval time.Duration
	// SecretsKeyFile holds the key (base64 of 32 bytes) the gateway seals
	// accounts' credentials with; the same file as the gateway's. Empty:
	// sealed catalog credentials are not used (files and environment are).
	SecretsKeyFile string

	// OfferingUnavailableTTL is how long an offering that answered out of
	// capacity is skipped by every replica.
	OfferingUnavailableTTL time.Duration
}

// minAckWaitPerHeartbeat is how many heartbeats the cloud ack wait must
// hold at least: with three, a beat lost (NATS briefly unreachable) still
// leaves the next one in time.
const minAckWaitPerHeartbeat = 3

// DefaultConfig returns production defaults.
func DefaultConfig() Config {
	return Config{
		NATS:                      natsconn.Options{URL: "nats://127.0.0.1:4222", Name: "cloud-adapter"},
		Topology:                  messaging.DefaultOptions(),
		HealthAddr:                ":8087",
		Concurrency:               64,
		Heartbeat:                 3 * time.Second,
		ShutdownGrace:             20 * time.Second,
		WatchPollInterval:         3 * time.Second,
		WatchFastPollInterval:     time.Second,
		WatchFastPollFor:          time.Minute,
		WatchMaxDuration:          10 * time.Minute,
		WatchNotFoundGrace:        time.Minute,
		CallTimeout:               30 * time.Second,
		RetryInitial:              250 * time.Millisecond,
		RetryMax:                  4 * time.Second,
		RetryAttempts:             6,
		TencentRateLimits:         tencent.DefaultLimits().String(),
		TencentScheme:             "https",
		AlibabaRateLimits:         alibaba.DefaultLimits().String(),
		AlibabaScheme:             "https",
		CredentialsReloadInterval: 10 * time.Second,
		OfferingUnavailableTTL:    app.DefaultOfferingUnavailableTTL,
	}
}

// RegisterFlags binds every field to a flag (and so to NODESMITH_<FLAG>
// through libs/config).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.NATS.RegisterFlags(fs)
	c.Topology.RegisterFlags(fs)
	fs.StringVar(&c.HealthAddr, "health-addr", c.HealthAddr, "address of /livez, /readyz and /metrics (empty: off)")
	fs.IntVar(&c.Concurrency, "concurrency", c.Concurrency, "cloud commands handled at once by this replica")
	fs.DurationVar(&c.Heartbeat, "heartbeat", c.Heartbeat, "how often a command in progress is marked InProgress (at most a third of --js-cloud-ack-wait)")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", c.ShutdownGrace, "how long in-flight commands may finish on shutdown")
	fs.DurationVar(&c.WatchPollInterval, "watch-poll-interval", c.WatchPollInterval, "pause between DescribeInstances rounds of a watch that saw no change for --watch-fast-poll-for")
	fs.DurationVar(&c.WatchFastPollInterval, "watch-fast-poll-interval", c.WatchFastPollInterval, "pause between DescribeInstances rounds of a young watch or one that saw a change recently (at most --watch-poll-interval)")
	fs.DurationVar(&c.WatchFastPollFor, "watch-fast-poll-for", c.WatchFastPollFor, "how long after its start or last change a watch polls every --watch-fast-poll-interval (0: never)")
	fs.DurationVar(&c.WatchMaxDuration, "watch-max-duration", c.WatchMaxDuration, "longest a watch polls before giving up")
	fs.DurationVar(&c.WatchNotFoundGrace, "watch-not-found-grace", c.WatchNotFoundGrace, "how long a watched VM must be absent to be reported NOT_FOUND")
	fs.DurationVar(&c.CallTimeout, "cloud-call-timeout", c.CallTimeout, "timeout of one cloud API call")
	fs.DurationVar(&c.RetryInitial, "cloud-retry-initial", c.RetryInitial, "first backoff of a throttled or transient cloud call")
	fs.DurationVar(&c.RetryMax, "cloud-retry-max", c.RetryMax, "longest backoff between retries of a cloud call")
	fs.IntVar(&c.RetryAttempts, "cloud-retry-attempts", c.RetryAttempts, "calls (first included) of a throttled or transient cloud call before giving up")
	fs.StringVar(&c.TencentRateLimits, "tencent-rate-limits", c.TencentRateLimits, "client-side CVM rate limits per account, region and action: Action=rate[:burst],...")
	fs.StringVar(&c.TencentEndpoint, "tencent-endpoint", c.TencentEndpoint, "CVM API host:port override (e.g. the emulator); empty: Tencent Cloud")
	fs.StringVar(&c.TencentScheme, "tencent-scheme", c.TencentScheme, "CVM API scheme: https or http")
	fs.StringVar(&c.AlibabaRateLimits, "alibaba-rate-limits", c.AlibabaRateLimits, "client-side ECS rate limits per account, region and action: Action=rate[:burst],...")
	fs.StringVar(&c.AlibabaEndpoint, "alibaba-endpoint", c.AlibabaEndpoint, "ECS API host:port override (e.g. the emulator); empty: Alibaba Cloud")
	fs.StringVar(&c.AlibabaScheme, "alibaba-scheme", c.AlibabaScheme, "ECS API scheme: https or http")
	fs.StringVar(&c.CredentialsDir, "credentials-dir", c.CredentialsDir, "directory of <account>/secretId and <account>/secretKey files")
	fs.StringVar(&c.CredentialsFile, "credentials-file", c.CredentialsFile, "YAML/JSON file: accounts: {<account>: {secretId, secretKey, token}}")
	fs.StringVar(&c.SecretsKeyFile, "secrets-key-file", c.SecretsKeyFile, "file with the key (base64 of 32 bytes) that opens credentials stored with accounts through the admin API; the gateway's file")
	fs.DurationVar(&c.CredentialsReloadInterval, "credentials-reload-interval", c.CredentialsReloadInterval, "how often credential files are re-read")
	fs.DurationVar(&c.OfferingUnavailableTTL, "offering-unavailable-ttl", c.OfferingUnavailableTTL, "how long an offering (zone, instance type, capacity type) that answered out of capacity is skipped by every replica")
	// NODESMITH_ACCOUNT_<ACCOUNT>_SECRET_ID etc.: credentials as values.
	config.AcceptEnv(fs, secrets.EnvPrefix+"*")
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if err := c.Topology.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("topology: %w", err))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("concurrency must be at least 1, got %d", c.Concurrency))
	}
	if c.Heartbeat <= 0 || c.Heartbeat*minAckWaitPerHeartbeat > c.Topology.CloudAckWait {
		errs = append(errs, fmt.Errorf("heartbeat %s must be positive and at most a third of the cloud ack wait %s (--heartbeat, --js-cloud-ack-wait): "+
			"with a slower heartbeat, one lost beat lets JetStream give a running command to another replica", c.Heartbeat, c.Topology.CloudAckWait))
	}
	if c.ShutdownGrace <= 0 {
		errs = append(errs, errors.New("shutdown grace must be positive"))
	}
	if c.WatchPollInterval <= 0 || c.WatchMaxDuration < c.WatchPollInterval {
		errs = append(errs, fmt.Errorf("watch poll interval %s must be positive and at most the watch max duration %s", c.WatchPollInterval, c.WatchMaxDuration))
	}
	if c.WatchFastPollInterval <= 0 || c.WatchFastPollFor < 0 {
		errs = append(errs, fmt.Errorf("watch fast poll interval %s must be positive and watch fast poll duration %s not negative", c.WatchFastPollInterval, c.WatchFastPollFor))
	}
	if c.WatchNotFoundGrace < 0 {
		errs = append(errs, errors.New("watch not-found grace must not be negative"))
	}
	if c.CallTimeout <= 0 {
		errs = append(errs, errors.New("cloud call timeout must be positive"))
	}
	if c.RetryAttempts < 1 || c.RetryInitial <= 0 || c.RetryMax < c.RetryInitial {
		errs = append(errs, fmt.Errorf("cloud retries: want attempts >= 1 and 0 < initial (%s) <= max (%s)", c.RetryInitial, c.RetryMax))
	}
	if _, err := ratelimit.Parse(c.TencentRateLimits); err != nil {
		errs = append(errs, fmt.Errorf("tencent rate limits: %w", err))
	}
	if s := strings.ToLower(c.TencentScheme); s != "http" && s != "https" {
		errs = append(errs, fmt.Errorf("tencent scheme must be http or https, got %q", c.TencentScheme))
	}
	if strings.Contains(c.TencentEndpoint, "/") {
		errs = append(errs, fmt.Errorf("tencent endpoint must be host[:port] (set the scheme with --tencent-scheme), got %q", c.TencentEndpoint))
	}
	if _, err := ratelimit.Parse(c.AlibabaRateLimits); err != nil {
		errs = append(errs, fmt.Errorf("alibaba rate limits: %w", err))
	}
	if s := strings.ToLower(c.AlibabaScheme); s != "http" && s != "https" {
		errs = append(errs, fmt.Errorf("alibaba scheme must be http or https, got %q", c.AlibabaScheme))
	}
	if strings.Contains(c.AlibabaEndpoint, "/") {
		errs = append(errs, fmt.Errorf("alibaba endpoint must be host[:port] (set the scheme with --alibaba-scheme), got %q", c.AlibabaEndpoint))
	}
	if c.OfferingUnavailableTTL <= 0 {
		errs = append(errs, fmt.Errorf("offering unavailable ttl must be positive, got %s (--offering-unavailable-ttl)", c.OfferingUnavailableTTL))
	}
	if c.CredentialsReloadInterval <= 0 {
		errs = append(errs, errors.New("credentials reload interval must be positive"))
	}
	return errors.Join(errs...)
}
