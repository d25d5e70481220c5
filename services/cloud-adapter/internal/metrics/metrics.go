// Package metrics defines the cloud adapter's Prometheus metrics. Cloud
// adapters report each API call and each rate-limiter wait through a
// *Cloud; a nil *Cloud records nothing, so tests need no registry.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	libmetrics "github.com/nodesmith/nodesmith/libs/metrics"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// Cloud holds the metrics of cloud API calls and published events.
type Cloud struct {
	calls     *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	rateWait  *prometheus.HistogramVec
	rateLimit *prometheus.GaugeVec
	rateBurst *prometheus.GaugeVec
	events    *prometheus.CounterVec
	credsLoad *prometheus.CounterVec
	catalog   *prometheus.GaugeVec
	marked    *prometheus.CounterVec
	fallbacks *prometheus.CounterVec
	exhausted *prometheus.CounterVec
}

// New registers the metrics on reg. Registering twice on the same registry
// (two replicas in one process) reuses the first registration.
func New(reg prometheus.Registerer) *Cloud {
	return &Cloud{
		calls: libmetrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_cloud_api_calls_total",
			Help: "Cloud API calls by provider, action and result (ok or the error kind).",
		}, []string{"provider", "action", "result"})),
		latency: libmetrics.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodesmith_cloud_api_call_seconds",
			Help:    "Latency of cloud API calls, rate-limiter wait excluded.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 10),
		}, []string{"provider", "action"})),
		rateWait: libmetrics.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodesmith_cloud_rate_limit_wait_seconds",
			Help:    "Time cloud API calls waited for the client-side rate limiter.",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 10),
		}, []string{"provider", "action"})),
		rateLimit: libmetrics.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodesmith_cloud_rate_limit_per_second",
			Help: "Client-side rate limit of this replica, in calls per second per (account, region) and action. " +
				"Replicas do not share buckets: N replicas on one account may together make N times as many calls.",
		}, []string{"provider", "action"})),
		rateBurst: libmetrics.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodesmith_cloud_rate_limit_burst",
			Help: "Burst of this replica's client-side rate limit per (account, region) and action.",
		}, []string{"provider", "action"})),
		events: libmetrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_cloud_events_published_total",
			Help: "Cloud events published for lifecycle, by kind.",
		}, []string{"kind"})),
		credsLoad: libmetrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_cloud_credentials_reloads_total",
			Help: "Credential reloads by result (changed, unchanged, error).",
		}, []string{"result"})),
		catalog: libmetrics.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodesmith_cloud_catalog_credentials",
			Help: "Catalog accounts with sealed credentials, by state: in_use, or unusable (no --secrets-key-file, " +
				"sealed under another key, corrupt); unusable accounts fall back to the credential files.",
		}, []string{"state"})),
		marked: libmetrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_cloud_offerings_marked_unavailable_total",
			Help: "Offerings marked unavailable after an out-of-capacity answer (at create, or a VM that failed to launch), " +
				"by provider, zone, instance type and capacity type.",
		}, []string{"provider", "zone", "instance_type", "capacity_type"})),
		fallbacks: libmetrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_cloud_offering_fallbacks_total",
			Help: "Create calls that succeeded on a later offering than the first one tried, by provider and " +
				"reason (create: an earlier offering was out of capacity or marked; relaunch: a VM failed to launch for capacity).",
		}, []string{"provider", "reason"})),
		exhausted: libmetrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_cloud_offerings_exhausted_total",
			Help: "Creates (reported to lifecycle as capacity failures) and relaunches (reported as LAUNCH_FAILED) " +
				"that found every offering out of capacity, by provider and reason (create, relaunch).",
		}, []string{"provider", "reason"})),
	}
}

var _ ports.OfferingMetrics = (*Cloud)(nil)

func reason(relaunch bool) string {
	if relaunch {
		return "relaunch"
	}
	return "create"
}

// OfferingMarked implements ports.OfferingMetrics.
func (m *Cloud) OfferingMarked(provider string, o domain.Offering) {
	if m == nil {
		return
	}
	m.marked.WithLabelValues(provider, o.Zone, o.InstanceType, o.CapacityType).Inc()
}

// OfferingFallback implements ports.OfferingMetrics.
func (m *Cloud) OfferingFallback(provider string, relaunch bool) {
	if m == nil {
		return
	}
	m.fallbacks.WithLabelValues(provider, reason(relaunch)).Inc()
}

// OfferingsExhausted implements ports.OfferingMetrics.
func (m *Cloud) OfferingsExhausted(provider string, relaunch bool) {
	if m == nil {
		return
	}
	m.exhausted.WithLabelValues(provider, reason(relaunch)).Inc()
}

// APICall records one cloud API call.
func (m *Cloud) APICall(provider, action, result string, took time.Duration) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues(provider, action, result).Inc()
	m.latency.WithLabelValues(provider, action).Observe(took.Seconds())
}

// RateLimitWait records the time one call waited for the rate limiter.
func (m *Cloud) RateLimitWait(provider, action string, waited time.Duration) {
	if m == nil {
		return
	}
	m.rateWait.WithLabelValues(provider, action).Observe(waited.Seconds())
}

// RateLimit records the client-side limit this replica applies to action:
// perSecond calls per second with bursts of burst, per (account, region).
func (m *Cloud) RateLimit(provider, action string, perSecond float64, burst int) {
	if m == nil {
		return
	}
	m.rateLimit.WithLabelValues(provider, action).Set(perSecond)
	m.rateBurst.WithLabelValues(provider, action).Set(float64(burst))
}

// EventPublished counts one published event of kind.
func (m *Cloud) EventPublished(kind string) {
	if m == nil {
		return
	}
	m.events.WithLabelValues(kind).Inc()
}

// CredentialsReload counts one credentials reload.
func (m *Cloud) CredentialsReload(result string) {
	if m == nil {
		return
	}
	m.credsLoad.WithLabelValues(result).Inc()
}

// CatalogCredentials records how many catalog accounts' sealed credentials
// are in use and how many cannot be opened.
func (m *Cloud) CatalogCredentials(inUse, unusable int) {
	if m == nil {
		return
	}
	m.catalog.WithLabelValues("in_use").Set(float64(inUse))
	m.catalog.WithLabelValues("unusable").Set(float64(unusable))
}
