package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/worker"
)

// BenchmarkRun is the worker's own cost per message (pull, ack) draining a
// queue with a handler that does nothing: what bounds lifecycle's event loop, which
// handles short events at high rates.
func BenchmarkRun(b *testing.B) {
	for _, concurrency := range []int{1, 32} {
		b.Run(fmt.Sprintf("concurrency=%d", concurrency), func(b *testing.B) {
			env, cons := setupTB(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			publish(b, env, ctx, b.N) // queued before the clock starts
			var handled atomic.Int64
			done := make(chan struct{})
			b.ResetTimer()
			go func() {
				defer close(done)
				_ = worker.Run(ctx, cons, worker.Options{Name: "w", Concurrency: concurrency},
					func(context.Context, jetstream.Msg) error { handled.Add(1); return nil })
			}()
			deadline := time.Now().Add(5 * time.Minute)
			for handled.Load() < int64(b.N) {
				if time.Now().After(deadline) {
					b.Fatalf("handled %d of %d", handled.Load(), b.N)
				}
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			cancel()
			<-done
		})
	}
}
