package cvmemu

import (
	"math"
	"time"
)

// tokenBucket is a classic token bucket: capacity burst, refilled at rate
// tokens per second.
type tokenBucket struct {
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newTokenBucket(rate float64, now time.Time) *tokenBucket {
	burst := math.Max(1, math.Ceil(rate))
	return &tokenBucket{rate: rate, burst: burst, tokens: burst, last: now}
}

func (b *tokenBucket) allow(now time.Time) bool {
	if elapsed := now.Sub(b.last).Seconds(); elapsed > 0 {
		b.tokens = math.Min(b.burst, b.tokens+elapsed*b.rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}

// wait is how long until the next token.
func (b *tokenBucket) wait() time.Duration {
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
}

// rateWindow measures the request rate a client actually produced: the
// number of requests in the trailing one-second window, and its peak. It
// holds at most one second's worth of timestamps.
type rateWindow struct {
	times []time.Time
	peak  int
}

// observe records a request at now and returns the current window count.
func (w *rateWindow) observe(now time.Time) int {
	cutoff := now.Add(-time.Second)
	i := 0
	for i < len(w.times) && !w.times[i].After(cutoff) {
		i++
	}
	// Reuse the backing array instead of letting it creep forward forever.
	w.times = append(w.times[:0], w.times[i:]...)
	w.times = append(w.times, now)
	if len(w.times) > w.peak {
		w.peak = len(w.times)
	}
	return len(w.times)
}
