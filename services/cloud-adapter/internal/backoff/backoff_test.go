package backoff_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/backoff"
)

func TestDelayGrowsWithJitterUpToMax(t *testing.T) {
	p := backoff.Policy{Initial: 100 * time.Millisecond, Max: time.Second, Attempts: 10}
	for retry, base := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 9: time.Second} {
		for range 50 {
			if d := p.Delay(retry); d < base/2 || d > base {
				t.Fatalf("Delay(%d) = %s, want within [%s, %s]", retry, d, base/2, base)
			}
		}
	}
}

var errRetry = errors.New("retry me")
var errFatal = errors.New("fatal")

func TestRetry(t *testing.T) {
	p := backoff.Policy{Initial: time.Microsecond, Max: time.Microsecond, Attempts: 4}
	retryable := func(err error) bool { return errors.Is(err, errRetry) }
	for _, tc := range []struct {
		name      string
		results   []error
		wantCalls int
		wantErr   error
	}{
		{"first call succeeds", []error{nil}, 1, nil},
		{"succeeds after retries", []error{errRetry, errRetry, nil}, 3, nil},
		{"gives up after the attempts", []error{errRetry, errRetry, errRetry, errRetry, nil}, 4, errRetry},
		{"does not retry other errors", []error{errFatal, nil}, 1, errFatal},
	} {
		t.Run(tc.name, func(t *testing.T) {
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
