// Package backoff is the project's one exponential backoff: a Policy gives
// the delay before each retry (Initial*Multiplier^(retry-1) capped at Max,
// then jittered), a Backoff steps through it for loops that log or count
// between attempts, Wait sleeps unless ctx ends, and Retry runs a bounded
// retry of one call.
//
// A library such as github.com/cenkalti/backoff/v5 was considered: its
// randomization is a +/- factor only (no "equal jitter", which most call
// sites here use so no wait is ever near zero) and its Retry owns the loop,
// while most call sites here log, count metrics or reset the backoff between
// attempts in their own way. One small policy type keeps each site's
// behaviour exactly and is trivial to test deterministically.
package backoff

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// Jitter is how a delay is randomized.
type Jitter int

const (
	// JitterEqual (the zero value) waits half the delay plus a random part
	// of the other half: synchronized callers spread out and no wait is
	// shorter than half the delay.
	JitterEqual Jitter = iota
	// JitterNone waits exactly the delay.
	JitterNone
	// JitterFull waits a random time in [0, delay].
	JitterFull
	// JitterSpread waits delay*(1 +/- Spread), uniformly.
	JitterSpread
)

// Policy shapes a backoff. The zero Multiplier means 2 and the zero Jitter
// means JitterEqual.
type Policy struct {
	// Initial is the delay before the first retry.
	Initial time.Duration
	// Max caps one delay (before jitter); <= 0 means no cap.
	Max time.Duration
	// Multiplier grows the delay each retry; values <= 1 mean 2.
	Multiplier float64
	// Jitter randomizes each delay; Spread is JitterSpread's fraction
	// (clamped to [0, 1]).
	Jitter Jitter
	Spread float64
	// Attempts bounds Retry: the total number of calls, the first one
	// included (< 1 means one call). Backoff and Delay ignore it.
	Attempts int
	// Rand returns a random int64 in [0, n) (n > 0); nil means
	// math/rand/v2's Int64N. Tests inject a fixed one.
	Rand func(n int64) int64
}

// Base is the delay before retry number retry (1 for the first retry),
// without jitter: Initial*Multiplier^(retry-1), capped at Max.
func (p Policy) Base(retry int) time.Duration {
	if p.Initial <= 0 {
		return 0
	}
	mult := p.Multiplier
	if mult <= 1 {
		mult = 2
	}
	d := float64(p.Initial) * math.Pow(mult, float64(max(retry, 1)-1))
	limit := float64(math.MaxInt64)
	if p.Max > 0 {
		limit = float64(p.Max)
	}
	if d >= limit {
		if p.Max > 0 {
			return p.Max
		}
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(d)
}

// Delay is Base(retry) with the policy's jitter applied.
func (p Policy) Delay(retry int) time.Duration {
	d := p.Base(retry)
	if d <= 0 {
		return 0
	}
	switch p.Jitter {
	case JitterNone:
		return d
	case JitterFull:
		return p.rand(int64(d) + 1)
	case JitterSpread:
		w := time.Duration(float64(d) * min(max(p.Spread, 0), 1))
		if w <= 0 {
			return d
		}
		return d - w + p.rand(2*int64(w))
	default: // JitterEqual
		half := d / 2
		return half + p.rand(int64(half)+1)
	}
}

func (p Policy) rand(n int64) time.Duration {
	if n <= 0 {
		return 0
	}
	if p.Rand != nil {
		return time.Duration(p.Rand(n))
	}
	return time.Duration(rand.Int64N(n))
}

// Backoff steps through a Policy's delays. It is not safe for concurrent
// use.
type Backoff struct {
	p       Policy
	retries int
}

// New starts a Backoff at the policy's first retry.
func (p Policy) New() *Backoff { return &Backoff{p: p} }

// Next returns the delay before the next retry and advances.
func (b *Backoff) Next() time.Duration {
	b.retries++
	return b.p.Delay(b.retries)
}

// Reset starts again from Initial (after a success that should forget
// earlier failures).
func (b *Backoff) Reset() { b.retries = 0 }

// Retries is the number of delays Next has returned since the last Reset.
func (b *Backoff) Retries() int { return b.retries }

// Wait waits d unless ctx ends first, in which case it returns ctx.Err().
func Wait(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Retry calls fn until it succeeds, returns an error retryable rejects, the
// policy's Attempts are used (the last error is returned) or ctx ends (ctx's
// error is returned).
func Retry(ctx context.Context, p Policy, retryable func(error) bool, fn func(ctx context.Context) error) error {
	attempts := max(p.Attempts, 1)
	b := p.New()
	var err error
	for i := range attempts {
		if i > 0 {
			if werr := Wait(ctx, b.Next()); werr != nil {
				return werr
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
