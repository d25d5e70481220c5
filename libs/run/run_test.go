package run_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/run"
)

func TestEveryCallsUntilTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int32
	reached := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- run.Every(ctx, time.Millisecond, func(context.Context) {
			if calls.Add(1) == 3 {
				close(reached)
			}
		})
	}()
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatalf("f called %d times in 30s at a 1ms interval", calls.Load())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Every = %v, want nil when the context ends", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Every did not return after the context ended")
	}
	n := calls.Load()
	// Every has returned: f is not called again.
	if got := calls.Load(); got != n {
		t.Fatalf("f called after Every returned: %d then %d", n, got)
	}
}
