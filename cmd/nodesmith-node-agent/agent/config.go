package agent

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"
)

// Config is the agent's configuration; every field is a flag (and a
// NODESMITH_* variable, libs/config).
type Config struct {
	// Provider picks a known metadata URL: tencent or alibaba.
	Provider string
	// MetadataURL overrides Provider's URL (the emulator's per-VM
	// endpoint, a proxy); the notice source is then "url".
	MetadataURL string
	// NodeName is the Node the agent runs on (the downward API's
	// spec.nodeName).
	NodeName string
	// Kubeconfig: empty means the in-cluster configuration.
	Kubeconfig string
	// Interval between polls; RequestTimeout bounds each.
	Interval       time.Duration
	RequestTimeout time.Duration
	// HealthAddr serves /livez, /readyz and /metrics.
	HealthAddr string
	// ShutdownGrace bounds the health server's graceful shutdown.
	ShutdownGrace time.Duration
}

// DefaultConfig is the configuration without flags: Tencent, every 5 s.
func DefaultConfig() Config {
	return Config{
		Provider:       string(contract.SpotSourceTencent),
		NodeName:       os.Getenv("NODE_NAME"),
		Interval:       5 * time.Second,
		RequestTimeout: 2 * time.Second,
		HealthAddr:     ":8087",
		ShutdownGrace:  5 * time.Second,
	}
}

// RegisterFlags binds c's fields to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Provider, "provider", c.Provider, "cloud whose instance metadata announces spot reclaims: tencent or alibaba (ignored with --metadata-url)")
	fs.StringVar(&c.MetadataURL, "metadata-url", c.MetadataURL, "termination-time URL to poll instead of the provider's (404: no reclaim; a time: reclaim scheduled)")
	fs.StringVar(&c.NodeName, "node-name", c.NodeName, "the Node this agent runs on (default: $NODE_NAME, from the downward API)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "kubeconfig file; empty: the in-cluster service account")
	fs.DurationVar(&c.Interval, "interval", c.Interval, "time between two polls of the metadata URL")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", c.RequestTimeout, "timeout of one metadata request")
	fs.StringVar(&c.HealthAddr, "health-addr", c.HealthAddr, "address serving /livez, /readyz and /metrics")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", c.ShutdownGrace, "graceful shutdown bound of the health server")
}

// Source returns the URL to poll and the source the notice is annotated
// with, or an error naming the bad flag.
func (c Config) Source() (string, contract.SpotSource, error) {
	if c.MetadataURL != "" {
		u, err := url.Parse(c.MetadataURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", "", fmt.Errorf("--metadata-url %q: want an absolute http(s) URL", c.MetadataURL)
		}
		return c.MetadataURL, contract.SpotSourceURL, nil
	}
	s := contract.SpotSource(strings.ToLower(strings.TrimSpace(c.Provider)))
	if u, ok := s.TerminationURL(); ok {
		return u, s, nil
	}
	names := make([]string, len(contract.SpotSources))
	for i, k := range contract.SpotSources {
		names[i] = string(k)
	}
	return "", "", fmt.Errorf("--provider %q: want one of %s, or give --metadata-url", c.Provider, strings.Join(names, ", "))
}

// Validate checks the configuration, naming the first bad flag.
func (c Config) Validate() error {
	if _, _, err := c.Source(); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(c.NodeName) == "":
		return errors.New("--node-name (or $NODE_NAME) is required: the Node to mark")
	case c.Interval <= 0:
		return fmt.Errorf("--interval %s: must be positive", c.Interval)
	case c.RequestTimeout <= 0:
		return fmt.Errorf("--request-timeout %s: must be positive", c.RequestTimeout)
	case c.ShutdownGrace < 0:
		return fmt.Errorf("--shutdown-grace %s: must not be negative", c.ShutdownGrace)
	}
	return nil
}
