package prom

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	libmetrics "github.com/nodesmith/nodesmith/libs/metrics"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
)

var _ app.SpotObserver = (*Metrics)(nil)

// spotMetrics are the spot interruption metrics (issue 16).
type spotMetrics struct {
	interruptions *prometheus.CounterVec
	replacement   *prometheus.HistogramVec
}

func newSpotMetrics(reg prometheus.Registerer) *spotMetrics {
	s := &spotMetrics{
		interruptions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_lifecycle_spot_interruptions_total",
			Help: "Instances whose spot VM the cloud announced it reclaims (drained and replaced), by group.",
		}, []string{"group"}),
		replacement: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodesmith_lifecycle_spot_replacement_seconds",
			Help:    "Time from a spot reclaim notice (as the node agent observed it) to the group's replacement instance Running, by group.",
			Buckets: []float64{15, 30, 60, 90, 120, 180, 300, 600, 1200},
		}, []string{"group"}),
	}
	s.interruptions = libmetrics.Register(reg, s.interruptions)
	s.replacement = libmetrics.Register(reg, s.replacement)
	return s
}

// SpotInterrupted implements app.SpotObserver.
func (m *Metrics) SpotInterrupted(group string) {
	m.spot.interruptions.WithLabelValues(group).Inc()
}

// SpotReplacementRunning implements app.SpotObserver.
func (m *Metrics) SpotReplacementRunning(group string, d time.Duration) {
	m.spot.replacement.WithLabelValues(group).Observe(d.Seconds())
}
