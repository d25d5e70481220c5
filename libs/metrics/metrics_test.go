package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRegisterReusesTheExistingCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	newCounter := func() prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "nodesmith_test_total", Help: "t"})
	}
	a := Register(reg, newCounter())
	b := Register(reg, newCounter())
	a.Inc()
	b.Inc()
	if got := testutil.ToFloat64(a); got != 2 {
		t.Fatalf("shared counter = %v, want 2", got)
	}
}
