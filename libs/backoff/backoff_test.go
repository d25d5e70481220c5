package backoff_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/backoff"
)

const ms = time.Millisecond

func TestBaseGrowsToMax(t *testing.T) {
	p := backoff.Policy{Initial: 100 * ms, Max: time.Second}
	for retry, want := range map[int]time.Duration{0: 100 * ms, 1: 100 * ms, 2: 200 * ms, 3: 400 * ms, 4: 800 * ms, 5: time.Second, 9: time.Second, math.MaxInt: time.Second} {
		if got := p.Base(retry); got != want {
			t.Errorf("Base(%d) = %s, want %s", retry, got, want)
		}
	}
	p.Multiplier = 3
	if got := p.Base(3); got != 900*ms {
		t.Errorf("Base(3) with multiplier 3 = %s, want 900ms", got)
	}
	uncapped := backoff.Policy{Initial: time.Second}
	if got := uncapped.Base(1000); got != time.Duration(math.MaxInt64) {
		t.Errorf("uncapped Base(1000) = %s, want the longest duration", got)
	}
	if got := (backoff.Policy{}).Delay(3); got != 0 {
		t.Errorf("zero policy Delay = %s, want 0", got)
	}
}

// fixed returns a Rand that answers frac of its bound (0 the lowest, 1 the
// highest value), recording the bounds it was asked for.
func fixed(frac float64, bounds *[]int64) func(int64) int64 {
	return func(n int64) int64 {
		*bounds = append(*bounds, n)
		return int64(frac * float64(n-1))
	}
}

func TestJitter(t *testing.T) {
	for _, tc := range []struct {
		name     string
		jitter   backoff.Jitter
		spread   float64
		low, top time.Duration // the delay at the lowest and highest random value, for a 400ms base
	}{
		{"equal (the default)", backoff.JitterEqual, 0, 200 * ms, 400 * ms},
		{"none", backoff.JitterNone, 0, 400 * ms, 400 * ms},
		{"full", backoff.JitterFull, 0, 0, 400 * ms},
		{"spread 50%", backoff.JitterSpread, 0.5, 200 * ms, 600*ms - 1},
		{"spread 20%", backoff.JitterSpread, 0.2, 320 * ms, 480*ms - 1},
		{"spread 0", backoff.JitterSpread, 0, 400 * ms, 400 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bounds []int64
			for frac, want := range map[float64]time.Duration{0: tc.low, 1: tc.top} {
				p := backoff.Policy{Initial: 100 * ms, Max: time.Second, Jitter: tc.jitter, Spread: tc.spread, Rand: fixed(frac, &bounds)}
				if got := p.Delay(3); got != want {
					t.Errorf("Delay(3) with random value %v = %s, want %s", frac, got, want)
				}
			}
			for _, n := range bounds {
				if n <= 0 {
					t.Errorf("Rand asked for [0, %d)", n)
				}
			}
		})
	}
}

func TestDefaultRandStaysInRange(t *testing.T) {
	p := backoff.Policy{Initial: 100 * ms, Max: time.Second}
	for range 200 {
		if d := p.Delay(4); d < 400*ms || d > 800*ms {
			t.Fatalf("Delay(4) = %s, want within [400ms, 800ms]", d)
		}
	}
}

func TestBackoffStepsAndResets(t *testing.T) {
	b := backoff.Policy{Initial: 10 * ms, Max: 50 * ms, Jitter: backoff.JitterNone}.New()
	var got []time.Duration
	for range 4 {
		got = append(got, b.Next())
	}
	want := []time.Duration{10 * ms, 20 * ms, 40 * ms, 50 * ms}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
	if b.Retries() != 4 {
		t.Fatalf("Retries() = %d, want 4", b.Retries())
	}
	b.Reset()
	if d := b.Next(); d != 10*ms {
		t.Fatalf("Next after Reset = %s, want 10ms", d)
	}
}

func TestWait(t *testing.T) {
	if err := backoff.Wait(context.Background(), 0); err != nil {
		t.Fatalf("Wait(0) = %v", err)
	}
	if err := backoff.Wait(context.Background(), time.Microsecond); err != nil {
		t.Fatalf("Wait(1µs) = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := backoff.Wait(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on an ended context = %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- backoff.Wait(ctx, time.Hour) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait cancelled while waiting = %v, want context.Canceled", err)
	}
}

var (
	errRetry = errors.New("retry me")
	errFatal = errors.New("fatal")
)

func TestRetry(t *testing.T) {
	p := backoff.Policy{Initial: time.Microsecond, Max: time.Microsecond, Attempts: 4}
	retryable := func(err error) bool { return errors.Is(err, errRetry) }
	for _, tc := range []struct {
		name      string
		attempts  int
		results   []error
		wantCalls int
		wantErr   error
	}{
		{"first call succeeds", 4, []error{nil}, 1, nil},
		{"succeeds after retries", 4, []error{errRetry, errRetry, nil}, 3, nil},
		{"gives up after the attempts", 4, []error{errRetry, errRetry, errRetry, errRetry, nil}, 4, errRetry},
		{"does not retry other errors", 4, []error{errFatal, nil}, 1, errFatal},
		{"zero attempts still calls once", 0, []error{errRetry, nil}, 1, errRetry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := p
			p.Attempts = tc.attempts
			calls := 0
			err := backoff.Retry(context.Background(), p, retryable, func(context.Context) error {
				calls++
				return tc.results[calls-1]
			})
			if calls != tc.wantCalls || !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("calls %d err %v, want %d and %v", calls, err, tc.wantCalls, tc.wantErr)
			}
		})
	}
}

func TestRetryStopsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := backoff.Retry(ctx, backoff.Policy{Initial: time.Hour, Max: time.Hour, Attempts: 5}, func(error) bool { return true }, func(context.Context) error {
		calls++
		cancel()
		return errRetry
	})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("err %v after %d calls, want context.Canceled after 1", err, calls)
	}
}
