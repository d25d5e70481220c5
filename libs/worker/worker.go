// Package worker runs a JetStream pull consumer with bounded concurrency:
// the part every worker service (cloud-adapter, hook-runner) and lifecycle's
// event loop share. It pulls a message only for a free slot (no prefetch,
// so work spreads evenly over replicas), heartbeats long work so AckWait
// never fires mid-task, naks failures with backoff, terminates poison
// messages, and on shutdown stops pulling, hands back a message that
// arrives meanwhile and lets in-flight work finish within a grace period.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/libs/backoff"
	"github.com/nodesmith/nodesmith/libs/metrics"
	"github.com/nodesmith/nodesmith/libs/tracing"
)

// Handler processes one message. Returning nil acks it; an error made with
// Permanent terminates it (it is never redelivered); any other error naks it
// with a backoff delay so JetStream redelivers it, up to the consumer's
// MaxDeliver.
type Handler func(ctx context.Context, msg jetstream.Msg) error

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as not worth a redelivery (undecodable message,
// invalid command).
func Permanent(err error) error { return permanentError{err: err} }

// IsPermanent reports whether err was made with Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// Options configure Run.
type Options struct {
	// Name labels logs and metrics (usually the consumer name).
	Name string
	// Concurrency is the number of messages handled at once by this replica.
	Concurrency int
	// Heartbeat is how often a running handler's message is marked
	// InProgress; keep it well below the consumer's AckWait.
	Heartbeat time.Duration
	// ShutdownGrace is how long in-flight handlers may run after ctx ends
	// before their context is cancelled.
	ShutdownGrace time.Duration
	// MaxNakDelay caps the redelivery backoff.
	MaxNakDelay time.Duration
	Logger      *slog.Logger
	Metrics     *Metrics
}

func (o *Options) defaults() {
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 10 * time.Second
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = 30 * time.Second
	}
	if o.MaxNakDelay <= 0 {
		o.MaxNakDelay = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Run consumes from cons until ctx is done, then drains as described in the
// package comment and returns nil. It returns an error only if consuming
// cannot start.
//
// It pulls only for free slots: each pull asks for as many messages as
// this replica has free slots right then, and another pull starts once a
// slot is free again. A busy replica therefore holds no messages beyond
// those it handles, so queued work goes to whichever replica has room (a
// prefetching iterator parks commands in a busy replica's buffer while
// others idle), and a backlog is still drained in batches. A failed pull
// (NATS restarting, consumer briefly unavailable) is retried with backoff:
// Run never stops consuming before ctx ends.
func Run(ctx context.Context, cons jetstream.Consumer, o Options, h Handler) error {
	o.defaults()
	if cons == nil {
		return fmt.Errorf("consuming %s: no consumer", o.Name)
	}
	// Handlers get their own context: it outlives ctx by the grace period so
	// in-flight work can finish on SIGTERM.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	// slots holds a token per running handler (and per message asked for).
	slots := make(chan struct{}, o.Concurrency)
	var wg sync.WaitGroup
	failures := 0
	for ctx.Err() == nil {
		// Wait for one free slot, then take every other free one.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		n := 1
	more:
		for n < o.Concurrency {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		got, err := pull(cons, n, func(msg jetstream.Msg) {
			if ctx.Err() != nil {
				// Received as shutdown began: hand it to another replica
				// now rather than after AckWait.
				_ = msg.Nak()
				<-slots
				return
			}
			wg.Add(1)
			go func() {
				defer func() { <-slots; wg.Done() }()
				handle(workCtx, msg, o, h)
			}()
		})
		for range n - got {
			<-slots // asked for but not delivered
		}
		if err == nil || ctx.Err() != nil {
			failures = 0
			continue
		}
		failures++
		d := pullBackoff(failures)
		o.Logger.Warn("pulling messages failed, retrying", "consumer", o.Name, "err", err, "in", d)
		_ = backoff.Wait(ctx, d) // a stop is noticed by the loop's condition
	}

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(o.ShutdownGrace):
		o.Logger.Warn("shutdown grace elapsed, cancelling in-flight work", "consumer", o.Name)
		cancelWork()
		<-done
	}
	return nil
}

// pullWait bounds one pull request: an idle replica renews its request this
// often, which also bounds how long a request lost with a NATS connection
// leaves free slots unused, and how long a stopping replica waits for its
// last request to end.
const pullWait = time.Second

// pull asks for up to n messages, waiting at most pullWait, and passes each
// to deliver as it arrives. It returns how many were delivered; an expired
// request is not an error.
//
// The request deliberately ignores the shutdown context: cancelling a
// fetch drops the messages the server already sent to it, and those wait
// for the consumer's AckWait (10s by default) before another replica gets
// them. Letting the request run out instead hands every one to deliver,
// which naks it at once during shutdown.
func pull(cons jetstream.Consumer, n int, deliver func(jetstream.Msg)) (int, error) {
	batch, err := cons.Fetch(n, jetstream.FetchMaxWait(pullWait))
	if err != nil {
		return 0, err
	}
	got := 0
	for msg := range batch.Messages() {
		got++
		deliver(msg)
	}
	err = batch.Error()
	if err == nil || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return got, nil
	}
	return got, err
}

// pullBackoff is 100ms doubling up to 5s, with jitter so replicas that lost
// NATS together do not retry in lockstep.
func pullBackoff(failures int) time.Duration {
	return backoff.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second}.Delay(failures)
}

func handle(ctx context.Context, msg jetstream.Msg, o Options, h Handler) {
	ctx = tracing.Extract(ctx, msg.Headers())
	meta, _ := msg.Metadata()
	var delivered uint64 = 1
	if meta != nil {
		delivered = meta.NumDelivered
	}
	log := o.Logger.With("consumer", o.Name, "subject", msg.Subject(), "delivered", delivered)

	hbCtx, stopHB := context.WithCancel(ctx)
	go heartbeat(hbCtx, msg, o.Heartbeat, log)
	start := time.Now()
	o.Metrics.inFlight(o.Name, 1)
	err := safeCall(ctx, msg, h)
	o.Metrics.inFlight(o.Name, -1)
	stopHB()

	outcome := "ack"
	switch {
	case err == nil:
		// Wait for the server to confirm the ack: a lost ack means a
		// redelivery, which handlers tolerate, but we want to know.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		aerr := msg.DoubleAck(actx)
		cancel()
		if aerr != nil {
			log.Warn("ack failed; the message will be redelivered", "err", aerr)
		}
	case IsPermanent(err):
		outcome = "term"
		log.Error("dropping message that can never succeed", "err", err)
		_ = msg.TermWithReason(err.Error())
	default:
		outcome = "nak"
		delay := nakDelay(delivered, o.MaxNakDelay)
		log.Warn("handler failed, redelivering", "err", err, "in", delay)
		_ = msg.NakWithDelay(delay)
	}
	o.Metrics.observe(o.Name, outcome, delivered, time.Since(start))
}

// safeCall turns a handler panic into an error so one bad message cannot
// take the replica down.
func safeCall(ctx context.Context, msg jetstream.Msg, h Handler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panic: %v", r)
		}
	}()
	return h(ctx, msg)
}

func heartbeat(ctx context.Context, msg jetstream.Msg, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := msg.InProgress(); err != nil {
				log.Warn("heartbeat failed", "err", err)
			}
		}
	}
}

// nakDelay is exponential in the delivery count: 1s, 2s, 4s ... capped.
func nakDelay(delivered uint64, maxDelay time.Duration) time.Duration {
	return min(backoff.Policy{Initial: time.Second, Max: maxDelay, Jitter: backoff.JitterNone}.Delay(int(min(delivered, 64))), maxDelay)
}

// Metrics are the worker's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	handled    *prometheus.CounterVec
	redelivers *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	running    *prometheus.GaugeVec
}

// NewMetrics registers the worker metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_worker_messages_total",
			Help: "Messages handled by a JetStream consumer, by outcome (ack, nak, term).",
		}, []string{"consumer", "outcome"}),
		redelivers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_worker_redeliveries_total",
			Help: "Messages received more than once.",
		}, []string{"consumer"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodesmith_worker_handle_seconds",
			Help:    "Time to handle one message.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"consumer"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodesmith_worker_in_flight",
			Help: "Messages being handled now.",
		}, []string{"consumer"}),
	}
	m.handled = metrics.Register(reg, m.handled)
	m.redelivers = metrics.Register(reg, m.redelivers)
	m.duration = metrics.Register(reg, m.duration)
	m.running = metrics.Register(reg, m.running)
	return m
}

func (m *Metrics) inFlight(consumer string, d float64) {
	if m != nil {
		m.running.WithLabelValues(consumer).Add(d)
	}
}

func (m *Metrics) observe(consumer, outcome string, delivered uint64, took time.Duration) {
	if m == nil {
		return
	}
	m.handled.WithLabelValues(consumer, outcome).Inc()
	if delivered > 1 {
		m.redelivers.WithLabelValues(consumer).Inc()
	}
	m.duration.WithLabelValues(consumer).Observe(took.Seconds())
}

// Handled returns the counter of messages handled by consumer with outcome
// (ack, nak or term); for tests and dashboards.
func (m *Metrics) Handled(consumer, outcome string) prometheus.Counter {
	return m.handled.WithLabelValues(consumer, outcome)
}
