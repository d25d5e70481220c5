package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/libs/worker"
)

// setup returns a JetStream env and a fresh consumer on a private stream
// with a short AckWait, so redelivery paths run quickly.
func setup(t *testing.T, ackWait time.Duration) (*plainEnv, jetstream.Consumer) {
	return setupAck(t, ackWait)
}

// setupTB is setup for benchmarks.
func setupTB(b *testing.B) (*plainEnv, jetstream.Consumer) { return setupAck(b, 30*time.Second) }

// plainEnv is a JetStream server without nodesmith's identities: the
// worker is generic, and its tests make and remove their own stream and
// consumer, which no nodesmith identity may.
type plainEnv struct{ JS jetstream.JetStream }

func startPlain(t testing.TB) *plainEnv {
	t.Helper()
	_, js := natstest.StartPlain(t)
	return &plainEnv{JS: js}
}

func setupAck(t testing.TB, ackWait time.Duration) (*plainEnv, jetstream.Consumer) {
	t.Helper()
	env := startPlain(t)
	ctx := context.Background()
	if _, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"w.>"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	c, err := env.JS.CreateOrUpdateConsumer(ctx, "W", jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: 5})
	if err != nil {
		t.Fatal(err)
	}
	return env, c
}

func publish(t testing.TB, env *plainEnv, ctx context.Context, n int) {
	t.Helper()
	pub := messaging.NewPublisher(env.JS)
	for i := range n {
		if _, err := pub.Publish(ctx, "w.x", fmt.Sprint(i), wrapperspb.Int64(int64(i))); err != nil {
			t.Fatal(err)
		}
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAckNakAndPermanent(t *testing.T) {
	env, cons := setup(t, 5*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	publish(t, env, ctx, 3) // 0 acks, 1 fails once then acks, 2 is poison

	var mu sync.Mutex
	calls := map[string]int{}
	reg := prometheus.NewRegistry()
	m := worker.NewMetrics(reg)
	done := make(chan error, 1)
	go func() {
		done <- worker.Run(ctx, cons, worker.Options{Name: "w", Concurrency: 4, MaxNakDelay: 50 * time.Millisecond, Metrics: m},
			func(_ context.Context, msg jetstream.Msg) error {
				meta, _ := msg.Metadata()
				id := fmt.Sprint(meta.Sequence.Stream)
				mu.Lock()
				calls[id]++
				n := calls[id]
				mu.Unlock()
				switch id {
				case "2":
					if n == 1 {
						return errors.New("transient")
					}
				case "3":
					return worker.Permanent(errors.New("undecodable"))
				}
				return nil
			})
	}()
	eventually(t, "stream to empty", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls["1"] != 1 || calls["2"] != 2 || calls["3"] != 1 {
		t.Errorf("calls = %v, want 1:1 2:2 3:1", calls)
	}
	if got := testutil.ToFloat64(m.Handled("w", "term")); got != 1 {
		t.Errorf("term count = %v", got)
	}
	if got := testutil.ToFloat64(m.Handled("w", "nak")); got != 1 {
		t.Errorf("nak count = %v", got)
	}
	// Message 2 came twice: one redelivery.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP nodesmith_worker_redeliveries_total Messages received more than once.
# TYPE nodesmith_worker_redeliveries_total counter
nodesmith_worker_redeliveries_total{consumer="w"} 1
`), "nodesmith_worker_redeliveries_total"); err != nil {
		t.Error(err)
	}
}

func TestHeartbeatKeepsLongWorkFromRedelivery(t *testing.T) {
	env, cons := setup(t, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	publish(t, env, ctx, 1)
	var calls atomic.Int32
	done := make(chan struct{})
	go func() {
		_ = worker.Run(ctx, cons, worker.Options{Name: "w", Heartbeat: 200 * time.Millisecond},
			func(ctx context.Context, _ jetstream.Msg) error {
				calls.Add(1)
				time.Sleep(3 * time.Second) // three AckWaits
				return nil
			})
		close(done)
	}()
	eventually(t, "work to finish", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && calls.Load() > 0 && info.NumAckPending == 0 && info.NumPending == 0
	})
	cancel()
	<-done
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times; heartbeats should prevent redelivery", calls.Load())
	}
}

func TestShutdownLetsInFlightWorkFinish(t *testing.T) {
	env, cons := setup(t, 30*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	publish(t, env, context.Background(), 1)
	started := make(chan struct{})
	var finished atomic.Bool
	done := make(chan struct{})
	go func() {
		_ = worker.Run(ctx, cons, worker.Options{Name: "w", ShutdownGrace: 10 * time.Second},
			func(hctx context.Context, _ jetstream.Msg) error {
				close(started)
				select {
				case <-time.After(500 * time.Millisecond):
					finished.Store(true)
					return nil
				case <-hctx.Done():
					return hctx.Err()
				}
			})
		close(done)
	}()
	<-started
	cancel() // SIGTERM mid-task
	<-done
	if !finished.Load() {
		t.Fatal("in-flight handler was cut short before its grace period")
	}
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumPending != 0 {
		t.Fatalf("work left behind: pending=%d ackPending=%d", info.NumPending, info.NumAckPending)
	}
}

func TestTraceContextTravelsThroughHeaders(t *testing.T) {
	env, cons := setup(t, 5*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tid, _ := trace.TraceIDFromHex("0102030405060708090a0b0c0d0e0f10")
	sid, _ := trace.SpanIDFromHex("0102030405060708")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	pctx := trace.ContextWithSpanContext(ctx, sc)
	if _, err := messaging.NewPublisher(env.JS).Publish(pctx, "w.x", "t", wrapperspb.String("x")); err != nil {
		t.Fatal(err)
	}
	got := make(chan trace.SpanContext, 1)
	go func() {
		_ = worker.Run(ctx, cons, worker.Options{Name: "w"}, func(hctx context.Context, _ jetstream.Msg) error {
			got <- trace.SpanContextFromContext(hctx)
			return nil
		})
	}()
	select {
	case rsc := <-got:
		if rsc.TraceID() != tid || !rsc.IsRemote() {
			t.Fatalf("trace id = %s remote=%v, want %s from the publisher", rsc.TraceID(), rsc.IsRemote(), tid)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no message")
	}
}

func TestMetricsShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := worker.NewMetrics(reg)
	b := worker.NewMetrics(reg) // a second worker in the same process
	a.Handled("x", "ack").Inc()
	b.Handled("x", "ack").Inc()
	if got := testutil.ToFloat64(a.Handled("x", "ack")); got != 2 {
		t.Fatalf("shared counter = %v, want 2", got)
	}
}

// A busy replica holds only the messages it is handling: the rest stay on
// the stream for any replica with a free slot.
func TestPullsOnlyForFreeSlots(t *testing.T) {
	env, cons := setup(t, 30*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	publish(t, env, ctx, 6)

	release := make(chan struct{})
	var mu sync.Mutex
	handled := map[string]int{}
	run := func(name string, concurrency int) chan struct{} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = worker.Run(ctx, cons, worker.Options{Name: name, Concurrency: concurrency},
				func(hctx context.Context, _ jetstream.Msg) error {
					mu.Lock()
					handled[name]++
					mu.Unlock()
					select {
					case <-release:
						return nil
					case <-hctx.Done():
						return hctx.Err()
					}
				})
		}()
		return done
	}
	count := func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return handled[name]
	}
	doneA := run("a", 2)
	eventually(t, "replica a to run 2", func() bool { return count("a") == 2 })
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing prefetched: delivered-but-unacked equals what runs.
	if info.NumAckPending != 2 || info.NumPending != 4 {
		t.Fatalf("with replica a busy: ack pending %d, pending %d; want 2 and 4 (no prefetch)", info.NumAckPending, info.NumPending)
	}
	doneB := run("b", 4)
	eventually(t, "replica b to take the other 4", func() bool { return count("b") == 4 })
	if got := count("a"); got != 2 {
		t.Fatalf("replica a handled %d while busy, want 2", got)
	}
	close(release)
	eventually(t, "stream to empty", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	cancel()
	<-doneA
	<-doneB
}

// Pulls that fail (the consumer is gone for a while) are retried: Run keeps
// consuming once the consumer is back instead of stopping quietly.
func TestKeepsConsumingAfterPullFailures(t *testing.T) {
	env, cons := setup(t, 5*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- worker.Run(ctx, cons, worker.Options{Name: "w", Concurrency: 2},
			func(context.Context, jetstream.Msg) error { calls.Add(1); return nil })
	}()
	publish(t, env, ctx, 1)
	eventually(t, "first message", func() bool { return calls.Load() == 1 })

	if err := env.JS.DeleteConsumer(ctx, "W", "w"); err != nil {
		t.Fatal(err)
	}
	// Let the slots fail against the missing consumer at least once.
	time.Sleep(300 * time.Millisecond)
	if _, err := env.JS.CreateOrUpdateConsumer(ctx, "W", jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second, MaxDeliver: 5}); err != nil {
		t.Fatal(err)
	}
	publish(t, env, ctx, 2)
	eventually(t, "messages after the consumer came back", func() bool { return calls.Load() >= 2 })
	select {
	case err := <-done:
		t.Fatalf("Run returned before its context ended: %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestStopStrandsNoMessage stops replicas again and again while commands
// keep arriving, so messages are on their way to a stopping replica's pull
// request. Each must be handed back at once (handled or naked), never left
// waiting for AckWait: the last replica handles all of them long before
// the minute AckWait would take.
func TestStopStrandsNoMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("repeats a shutdown race")
	}
	env, cons := setup(t, time.Minute)
	var handled sync.Map
	h := func(_ context.Context, msg jetstream.Msg) error {
		handled.Store(string(msg.Data()), true)
		return nil
	}
	pubCtx, stopPub := context.WithCancel(context.Background())
	var published atomic.Int64
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		pub := messaging.NewPublisher(env.JS)
		for i := int64(0); pubCtx.Err() == nil; i++ {
			if _, err := pub.Publish(pubCtx, "w.x", fmt.Sprint(i), wrapperspb.Int64(i)); err != nil {
				return
			}
			published.Add(1)
			time.Sleep(time.Millisecond)
		}
	}()
	for range 15 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- worker.Run(ctx, cons, worker.Options{Name: "a", Concurrency: 4}, h) }()
		time.Sleep(50 * time.Millisecond)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	stopPub()
	<-pubDone

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// What to expect is what the stream stored: the publish in flight when
	// the publisher stopped may be stored although its caller saw the
	// cancellation instead of the ack.
	st, err := env.JS.Stream(ctx, "W")
	if err != nil {
		t.Fatal(err)
	}
	stored := st.CachedInfo().State.LastSeq
	if stored < uint64(published.Load()) {
		t.Fatalf("stream stored %d messages, %d publishes were acked", stored, published.Load())
	}
	go func() { _ = worker.Run(ctx, cons, worker.Options{Name: "b", Concurrency: 4}, h) }()
	n := func() uint64 {
		n := uint64(0)
		handled.Range(func(any, any) bool { n++; return true })
		return n
	}
	deadline := time.Now().Add(20 * time.Second) // AckWait is a minute
	for n() != stored {
		if time.Now().After(deadline) {
			info, err := cons.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Fatalf("%d of %d stored messages handled well before AckWait; consumer: %d ack pending, %d redelivered, %d pending",
				n(), stored, info.NumAckPending, info.NumRedelivered, info.NumPending)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
