// Package worker runs a JetStream pull consumer with bounded concurrency:
// the part every worker service (cloud-adapter, hook-runner) and lifecycle's
// event loop share. It heartbeats long work so AckWait never fires mid-task,
// naks failures with backoff, terminates poison messages, and on shutdown
// stops pulling, hands back prefetched messages and lets in-flight work
// finish within a grace period.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

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
func Run(ctx context.Context, cons jetstream.Consumer, o Options, h Handler) error {
	o.defaults()
	it, err := cons.Messages(jetstream.PullMaxMessages(o.Concurrency))
	if err != nil {
		return fmt.Errorf("consuming %s: %w", o.Name, err)
	}
	// Handlers get their own context: it outlives ctx by the grace period so
	// in-flight work can finish on SIGTERM.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			it.Drain()
		case <-stopped:
		}
	}()

	sem := make(chan struct{}, o.Concurrency)
	var wg sync.WaitGroup
	for {
		msg, err := it.Next()
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				o.Logger.Error("consumer stopped", "consumer", o.Name, "err", err)
			}
			break
		}
		if ctx.Err() != nil {
			// Prefetched after shutdown began: hand it to another replica now
			// rather than after AckWait.
			_ = msg.Nak()
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			handle(workCtx, msg, o, h)
		}()
	}
	close(stopped)

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
	d := time.Second
	for i := uint64(1); i < delivered && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
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
