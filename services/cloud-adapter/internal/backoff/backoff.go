// Package backoff retries a call with exponential backoff and jitter, up to
// a bounded number of attempts. Cloud adapters use it for throttled and
// transient cloud errors, so a burst of throttling is absorbed locally
// instead of failing a whole command.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy bounds the retries of one call.
type Policy struct {
	// Initial is the delay before the first retry; it doubles each retry.
	Initial time.Duration
	// Max caps one delay.
	Max time.Duration
	// Attempts is the total number of calls, the first one included.
	Attempts int
}

// DefaultPolicy absorbs a few seconds of throttling: 6 calls over about 8s.
func DefaultPolicy() Policy {
	return Policy{Initial: 250 * time.Millisecond, Max: 4 * time.Second, Attempts: 6}
}

// Delay is the wait before retry number retry (1 for the first retry):
// Initial*2^(retry-1) capped at Max, with "equal jitter" (half fixed, half
// random) so synchronized callers spread out without any waiting zero.
func (p Policy) Delay(retry int) time.Duration {
	d := p.Initial
	for i := 1; i < retry && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	if d <= 0 {
		return 0
	}
	half := d / 2
	return half + rand.N(half+1)
}

// Retry calls fn until it succeeds, returns an error retryable rejects, the
// attempts are exhausted (the last error is returned) or ctx ends (ctx's
// error is returned).
func Retry(ctx context.Context, p Policy, retryable func(error) bool, fn func(ctx context.Context) error) error {
	attempts := max(p.Attempts, 1)
	var err error
	for i := range attempts {
		if i > 0 {
			t := time.NewTimer(p.Delay(i))
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		if err = fn(ctx); err == nil || !retryable(err) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return err
}
