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

// StreamCollector reports how full a stream is against its limits, read
// from the server at scrape time (one stream-info request per scrape):
//
//	nodesmith_jetstream_stream_messages        messages stored
//	nodesmith_jetstream_stream_bytes           bytes stored
//	nodesmith_jetstream_stream_max_messages    MaxMsgs (absent when unlimited)
//	nodesmith_jetstream_stream_max_bytes       MaxBytes (absent when unlimited)
//	nodesmith_jetstream_stream_usage_ratio     the fuller of messages/MaxMsgs and bytes/MaxBytes (0 when unlimited)
//	nodesmith_jetstream_stream_up              1 when the info request succeeded
//
// A stream with DiscardNew refuses publishes at a ratio of 1 (the command
// stream: NodesmithCommandStreamNearLimit fires before that).
type StreamCollector struct {
	js                             jetstream.JetStream
	stream                         string
	timeout                        time.Duration
	msgs, bytes, maxMsgs, maxBytes *prometheus.Desc
	usage, up                      *prometheus.Desc
}

var _ prometheus.Collector = (*StreamCollector)(nil)

// NewStreamCollector returns a collector for stream.
func NewStreamCollector(js jetstream.JetStream, stream string) *StreamCollector {
	labels := prometheus.Labels{"stream": stream}
	desc := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, labels) }
	return &StreamCollector{
		js: js, stream: stream, timeout: 2 * time.Second,
		msgs:     desc("nodesmith_jetstream_stream_messages", "Messages stored in the stream."),
		bytes:    desc("nodesmith_jetstream_stream_bytes", "Bytes stored in the stream."),
		maxMsgs:  desc("nodesmith_jetstream_stream_max_messages", "The stream's MaxMsgs limit (absent when unlimited)."),
		maxBytes: desc("nodesmith_jetstream_stream_max_bytes", "The stream's MaxBytes limit (absent when unlimited)."),
		usage:    desc("nodesmith_jetstream_stream_usage_ratio", "The fuller of messages/MaxMsgs and bytes/MaxBytes: at 1 a DiscardNew stream refuses publishes."),
		up:       desc("nodesmith_jetstream_stream_up", "1 when the stream's info could be read at scrape time, else 0."),
	}
}

// Describe implements prometheus.Collector.
func (c *StreamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.msgs, c.bytes, c.maxMsgs, c.maxBytes, c.usage, c.up} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *StreamCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	s, err := c.js.Stream(ctx, c.stream)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	info := s.CachedInfo() // fresh: Stream just fetched it
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	gauge(c.up, 1)
	gauge(c.msgs, float64(info.State.Msgs))
	gauge(c.bytes, float64(info.State.Bytes))
	var usage float64
	if limit := info.Config.MaxMsgs; limit > 0 {
		gauge(c.maxMsgs, float64(limit))
		usage = max(usage, float64(info.State.Msgs)/float64(limit))
	}
	if limit := info.Config.MaxBytes; limit > 0 {
		gauge(c.maxBytes, float64(limit))
		usage = max(usage, float64(info.State.Bytes)/float64(limit))
	}
	gauge(c.usage, usage)
}

// RegisterStreamCollector registers a StreamCollector for stream on reg and
// returns the function that unregisters it; like RegisterConsumerCollector,
// a collector already registered for the stream is kept.
func RegisterStreamCollector(reg prometheus.Registerer, js jetstream.JetStream, stream string) (unregister func()) {
	c := NewStreamCollector(js, stream)
	if err := reg.Register(c); err != nil {
		return func() {}
	}
	return func() { reg.Unregister(c) }
}
