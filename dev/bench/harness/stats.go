package harness

import (
	"slices"
	"time"
)

// Summary describes a latency sample.
type Summary struct {
	N                         int
	Mean, P50, P99, P999, Max time.Duration
}

// Summarize sorts lat in place and summarizes it.
func Summarize(lat []time.Duration) Summary {
	if len(lat) == 0 {
		return Summary{}
	}
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	q := func(p float64) time.Duration {
		i := int(p * float64(len(lat)))
		return lat[min(i, len(lat)-1)]
	}
	return Summary{N: len(lat), Mean: sum / time.Duration(len(lat)), P50: q(0.50), P99: q(0.99), P999: q(0.999), Max: lat[len(lat)-1]}
}
