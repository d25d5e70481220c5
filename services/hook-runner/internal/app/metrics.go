package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/libs/metrics"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
)

// Metrics are the hook runner's Prometheus metrics. A nil *Metrics records
// nothing. Instance ids are never labels: their number is unbounded.
type Metrics struct {
	runs            *prometheus.CounterVec
	duration        *prometheus.HistogramVec
	connectAttempts prometheus.Counter
	connectFailures *prometheus.CounterVec
	publishFailures prometheus.Counter
}

// NewMetrics registers the metrics on reg. Registering twice on one
// registry (a service restarted in-process) reuses the first collectors.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_hook_runs_total",
			Help: "Hook runs by hook kind and result (succeeded, skipped, interrupted, or failed_<class>).",
		}, []string{"hook", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodesmith_hook_run_duration_seconds",
			Help:    "Duration of hook runs that reported a result, connecting included.",
			Buckets: []float64{0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 900, 1800},
		}, []string{"hook", "succeeded"}),
		connectAttempts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodesmith_hook_ssh_connection_attempts_total",
			Help: "SSH connection attempts (TCP connect and handshake).",
		}),
		connectFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_hook_ssh_connection_failures_total",
			Help: "Failed SSH connection attempts by reason (connection, auth, host_key, timeout, canceled, invalid).",
		}, []string{"reason"}),
		publishFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodesmith_hook_result_publish_failures_total",
			Help: "Failed attempts to publish a hook result (each is retried).",
		}),
	}
	m.runs = metrics.Register(reg, m.runs)
	m.duration = metrics.Register(reg, m.duration)
	m.connectAttempts = metrics.Register(reg, m.connectAttempts)
	m.connectFailures = metrics.Register(reg, m.connectFailures)
	m.publishFailures = metrics.Register(reg, m.publishFailures)
	return m
}

func (m *Metrics) observeResult(r domain.Result) {
	if m == nil {
		return
	}
	result := "succeeded"
	switch {
	case r.Skipped:
		result = "skipped"
	case !r.Succeeded:
		result = "failed_" + r.Failure.String()
	}
	m.runs.WithLabelValues(r.Kind.String(), result).Inc()
	if !r.Skipped {
		succeeded := "false"
		if r.Succeeded {
			succeeded = "true"
		}
		m.duration.WithLabelValues(r.Kind.String(), succeeded).Observe(r.FinishedAt.Sub(r.StartedAt).Seconds())
	}
}

func (m *Metrics) observeInterrupted(k domain.Kind) {
	if m != nil {
		m.runs.WithLabelValues(k.String(), "interrupted").Inc()
	}
}

// observeConnect counts connection attempts from what the executor
// reports: every attempt but a successful last one failed; retried attempts
// only ever fail for connection reasons, the last one for its own class.
func (m *Metrics) observeConnect(ex domain.Execution) {
	if m == nil || ex.ConnectAttempts == 0 {
		return
	}
	m.connectAttempts.Add(float64(ex.ConnectAttempts))
	retried := ex.ConnectAttempts - 1
	if retried > 0 {
		m.connectFailures.WithLabelValues(domain.FailureConnection.String()).Add(float64(retried))
	}
	if !ex.Connected {
		m.connectFailures.WithLabelValues(ex.Failure.String()).Inc()
	}
}

func (m *Metrics) observePublishFailure() {
	if m != nil {
		m.publishFailures.Inc()
	}
}
