// Package metricstest reads metrics back from a Prometheus registry in
// tests.
package metricstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Value returns the value of the first series of metric name whose labels
// include labels (every name in labels present with that value): a
// counter's or gauge's value, a histogram's sample count; 0 when no series
// matches.
func Value(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	for _, v := range values(t, g, name, labels) {
		return v
	}
	return 0
}

// Sum returns the sum of the values (as Value reads them) of every series
// of metric name whose labels include labels; 0 when none matches.
func Sum(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	var sum float64
	for _, v := range values(t, g, name, labels) {
		sum += v
	}
	return sum
}

// values returns the value of each series of name whose labels include
// labels, in the registry's order.
func values(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) []float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				out = append(out, m.GetCounter().GetValue())
			case m.GetGauge() != nil:
				out = append(out, m.GetGauge().GetValue())
			case m.GetHistogram() != nil:
				out = append(out, float64(m.GetHistogram().GetSampleCount()))
			}
		}
	}
	return out
}
