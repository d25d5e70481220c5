package service

import (
	"log/slog"

	"github.com/nodesmith/nodesmith/libs/backoff"
	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/alibaba"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/tencent"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/cloudcall"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/metrics"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ratelimit"
)

// providerEnv is what every cloud adapter may need to be built.
type providerEnv struct {
	cfg     Config
	creds   ports.Credentials
	metrics *metrics.Cloud
	log     *slog.Logger
}

// providers registers the cloud adapters by the name commands use in
// Target.provider (the template's "provider"). Another cloud is one more
// entry here and one package in internal/adapters implementing ports.Cloud.
var providers = map[string]func(providerEnv) (ports.Cloud, error){
	cloudspec.Tencent: newTencent,
	cloudspec.Alibaba: newAlibaba,
}

func newTencent(e providerEnv) (ports.Cloud, error) {
	settings, err := e.settings(tencent.Provider, e.cfg.TencentRateLimits)
	if err != nil {
		return nil, err
	}
	clients := tencent.NewClients(tencent.ClientOptions{
		Credentials: e.creds,
		Endpoint:    e.cfg.TencentEndpoint,
		Scheme:      e.cfg.TencentScheme,
		Timeout:     e.cfg.CallTimeout,
	})
	return tencent.New(tencent.Options{Clients: clients.Get, Settings: settings}), nil
}

func newAlibaba(e providerEnv) (ports.Cloud, error) {
	settings, err := e.settings(alibaba.Provider, e.cfg.AlibabaRateLimits)
	if err != nil {
		return nil, err
	}
	clients := alibaba.NewClients(alibaba.ClientOptions{
		Credentials: e.creds,
		Endpoint:    e.cfg.AlibabaEndpoint,
		Scheme:      e.cfg.AlibabaScheme,
		Timeout:     e.cfg.CallTimeout,
	})
	return alibaba.New(alibaba.Options{Clients: clients.Get, Settings: settings}), nil
}

// settings are a provider's pacing (its --<provider>-rate-limits), the
// shared retry and timeout flags, metrics and logs. The buckets are this
// replica's own: the start-up log says so where operators look when an
// account is throttled.
func (e providerEnv) settings(provider, rateLimits string) (cloudcall.Settings, error) {
	limits, err := ratelimit.Parse(rateLimits)
	if err != nil {
		return cloudcall.Settings{}, err
	}
	e.log.Info("client-side rate limits per replica (calls/s:burst per account, region and action; "+
		"replicas do not share them, so with N replicas on one account each should get 1/N of the account's limit)",
		"provider", provider, "limits", limits.String())
	return cloudcall.Settings{
		Limits:      limits,
		Retry:       backoff.Policy{Initial: e.cfg.RetryInitial, Max: e.cfg.RetryMax, Attempts: e.cfg.RetryAttempts},
		CallTimeout: e.cfg.CallTimeout,
		Metrics:     e.metrics,
		Logger:      e.log,
	}, nil
}
