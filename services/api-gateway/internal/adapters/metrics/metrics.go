// Package metrics instruments the gateway's ports and read model with
// Prometheus metrics, as decorators: adapters stay free of metric code.
package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/ports"
)

// Lifecycle decorates a ports.Lifecycle with request counts and latency.
type Lifecycle struct {
	next     ports.Lifecycle
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

var _ ports.Lifecycle = (*Lifecycle)(nil)

// InstrumentLifecycle wraps next; the metrics are registered on reg.
func InstrumentLifecycle(next ports.Lifecycle, reg prometheus.Registerer) *Lifecycle {
	l := &Lifecycle{
		next: next,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_gateway_lifecycle_requests_total",
			Help: "Operations sent to lifecycle, by operation and result code.",
		}, []string{"op", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodesmith_gateway_lifecycle_request_duration_seconds",
			Help:    "Lifecycle round-trip latency including retries while no leader answers, by operation.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2, 4, 8},
		}, []string{"op"}),
	}
	if reg != nil {
		reg.MustRegister(l.requests, l.duration)
	}
	return l
}

// Do implements ports.Lifecycle.
func (l *Lifecycle) Do(ctx context.Context, req ports.Request) (ports.Revisions, error) {
	op := "unknown"
	if req.Op != nil {
		op = req.Op.OpName()
	}
	start := time.Now()
	revs, err := l.next.Do(ctx, req)
	l.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	l.requests.WithLabelValues(op, domain.CodeOf(err).String()).Inc()
	return revs, err
}

// RegisterReadModel exports the read model's size, revisions and sync
// state, read at scrape time.
func RegisterReadModel(reg prometheus.Registerer, rm *app.ReadModel) {
	if reg == nil {
		return
	}
	gauge := func(name, help string, labels prometheus.Labels, f func(app.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, func() float64 { return f(rm.Stats()) })
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	reg.MustRegister(
		gauge("nodesmith_gateway_readmodel_groups", "Node groups in the read model.", nil, func(s app.Stats) float64 { return float64(s.Groups) }),
		gauge("nodesmith_gateway_readmodel_instances", "Instance records in the read model (including DELETED history).", nil, func(s app.Stats) float64 { return float64(s.Instances) }),
		gauge("nodesmith_gateway_readmodel_revision", "Last applied KV revision, by bucket.", prometheus.Labels{"bucket": "groups"}, func(s app.Stats) float64 { return float64(s.GroupsRevision) }),
		gauge("nodesmith_gateway_readmodel_revision", "Last applied KV revision, by bucket.", prometheus.Labels{"bucket": "instances"}, func(s app.Stats) float64 { return float64(s.InstancesRev) }),
		gauge("nodesmith_gateway_readmodel_synced", "1 once both buckets' initial values are loaded.", nil, func(s app.Stats) float64 { return b2f(s.GroupsSynced && s.InstancesSynced) }),
	)
}
