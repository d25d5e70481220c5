package prom_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/libs/metrics/metricstest"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/prom"
)

func TestSpotMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := prom.New(reg)
	m.SpotInterrupted("g")
	m.SpotInterrupted("g")
	m.SpotReplacementRunning("g", 40*time.Second)
	g := map[string]string{"group": "g"}
	if v := metricstest.Value(t, reg, "nodesmith_lifecycle_spot_interruptions_total", g); v != 2 {
		t.Errorf("interruptions %v, want 2", v)
	}
	if v := metricstest.Value(t, reg, "nodesmith_lifecycle_spot_replacement_seconds", g); v != 1 {
		t.Errorf("replacement observations %v, want 1", v)
	}
}
