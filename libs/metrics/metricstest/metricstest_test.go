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

func TestSum(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total"}, []string{"a", "b"})
	reg.MustRegister(c)
	c.WithLabelValues("x", "1").Add(2)
	c.WithLabelValues("x", "2").Add(3)
	c.WithLabelValues("y", "1").Add(5)
	for _, tc := range []struct {
		labels map[string]string
		want   float64
	}{
		{nil, 10},
		{map[string]string{"a": "x"}, 5},
		{map[string]string{"b": "1"}, 7},
		{map[string]string{"a": "z"}, 0},
	} {
		if got := metricstest.Sum(t, reg, "c_total", tc.labels); got != tc.want {
			t.Errorf("Sum(c_total, %v) = %v, want %v", tc.labels, got, tc.want)
		}
	}
	if got := metricstest.Sum(t, reg, "absent", nil); got != 0 {
		t.Errorf("Sum(absent) = %v, want 0", got)
	}
}
