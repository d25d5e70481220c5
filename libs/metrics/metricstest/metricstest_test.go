package metricstest_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/libs/metrics/metricstest"
)

func TestValue(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total"}, []string{"a", "b"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds"})
	reg.MustRegister(c, g, h)
	c.WithLabelValues("x", "1").Add(2)
	c.WithLabelValues("y", "1").Add(5)
	g.Set(7)
	h.Observe(1)
	h.Observe(2)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"c_total", map[string]string{"a": "y"}, 5},
		{"c_total", map[string]string{"a": "x", "b": "1"}, 2},
		{"c_total", map[string]string{"a": "z"}, 0},
		{"c_total", map[string]string{"missing": "x"}, 0},
		{"g", nil, 7},
		{"h_seconds", nil, 2},
		{"absent", nil, 0},
	} {
		if got := metricstest.Value(t, reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("Value(%s, %v) = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
}
