package messaging

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// ConsumerCollector reports a durable consumer's backlog, read from the
// server at scrape time (one consumer-info request per scrape):
//
//	nodesmith_jetstream_consumer_pending_messages      not yet delivered
//	nodesmith_jetstream_consumer_ack_pending_messages  delivered, not yet acknowledged
//	nodesmith_jetstream_consumer_redelivered_messages  delivered more than once, not yet acknowledged
//	nodesmith_jetstream_consumer_up                    1 when the info request succeeded
//
// The stream and consumer are constant labels, so every service can
// register a collector for its own consumer on a shared registry.
type ConsumerCollector struct {
	js                      jetstream.JetStream
	stream, consumer        string
	timeout                 time.Duration
	pending, ackPending, up *prometheus.Desc
	redelivered             *prometheus.Desc
}

var _ prometheus.Collector = (*ConsumerCollector)(nil)

// NewConsumerCollector returns a collector for consumer on stream.
func NewConsumerCollector(js jetstream.JetStream, stream, consumer string) *ConsumerCollector {
	labels := prometheus.Labels{"stream": stream, "consumer": consumer}
	desc := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, labels) }
	return &ConsumerCollector{
		js: js, stream: stream, consumer: consumer, timeout: 2 * time.Second,
		pending:     desc("nodesmith_jetstream_consumer_pending_messages", "Messages of the stream not yet delivered to the consumer."),
		ackPending:  desc("nodesmith_jetstream_consumer_ack_pending_messages", "Messages delivered to the consumer and not yet acknowledged."),
		redelivered: desc("nodesmith_jetstream_consumer_redelivered_messages", "Messages delivered more than once and not yet acknowledged."),
		up:          desc("nodesmith_jetstream_consumer_up", "1 when the consumer's info could be read at scrape time, else 0."),
	}
}

// Describe implements prometheus.Collector.
func (c *ConsumerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.ackPending
	ch <- c.redelivered
	ch <- c.up
}

// Collect implements prometheus.Collector.
func (c *ConsumerCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	cons, err := c.js.Consumer(ctx, c.stream, c.consumer)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	info := cons.CachedInfo() // fresh: Consumer just fetched it
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(info.NumPending))
	ch <- prometheus.MustNewConstMetric(c.ackPending, prometheus.GaugeValue, float64(info.NumAckPending))
	ch <- prometheus.MustNewConstMetric(c.redelivered, prometheus.GaugeValue, float64(info.NumRedelivered))
}

// RegisterConsumerCollector registers a ConsumerCollector for consumer on
// reg and returns the function that unregisters it (call it at shutdown,
// so an in-process restart on the same registry works). When another
// component of the process already registered one for the same consumer
// (replicas sharing a registry), that one is kept and unregister does
// nothing.
func RegisterConsumerCollector(reg prometheus.Registerer, js jetstream.JetStream, stream, consumer string) (unregister func()) {
	c := NewConsumerCollector(js, stream, consumer)
	if err := reg.Register(c); err != nil {
		return func() {}
	}
	return func() { reg.Unregister(c) }
}
