package messaging_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
)

func gauge(t *testing.T, reg *prometheus.Registry, name string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func TestConsumerCollectorFollowsTheBacklog(t *testing.T) {
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg := prometheus.NewRegistry()
	_, hrjs := env.ConnectAs(t, natsauth.HookRunner) // the worker collects and pulls
	reg.MustRegister(messaging.NewConsumerCollector(hrjs, messaging.CommandStream, messaging.ConsumerHookRunner))

	// want waits for the gauges to read the step's values: the server
	// counts a stored message into a consumer's pending asynchronously, so
	// a scrape right after the publish ack may still see the old backlog.
	want := func(step string, pending, ackPending, redelivered float64) {
		t.Helper()
		wants := map[string]float64{
			"nodesmith_jetstream_consumer_up":                   1,
			"nodesmith_jetstream_consumer_pending_messages":     pending,
			"nodesmith_jetstream_consumer_ack_pending_messages": ackPending,
			"nodesmith_jetstream_consumer_redelivered_messages": redelivered,
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			var wrong []string
			for name, v := range wants {
				if got, ok := gauge(t, reg, name); !ok || got != v {
					wrong = append(wrong, fmt.Sprintf("%s = %v (present %v), want %v", name, got, ok, v))
				}
			}
			if len(wrong) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s", step, strings.Join(wrong, "; "))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	want("empty", 0, 0, 0)

	pub := messaging.NewPublisher(env.JS)
	publish := func(id string) {
		t.Helper()
		if _, err := pub.Publish(ctx, messaging.SubjectHookRun, id, wrapperspb.String("x")); err != nil {
			t.Fatal(err)
		}
	}
	publish("m0")
	want("published", 1, 0, 0)

	cons, err := hrjs.Consumer(ctx, messaging.CommandStream, messaging.ConsumerHookRunner)
	if err != nil {
		t.Fatal(err)
	}
	fetch := func() jetstream.Msg {
		t.Helper()
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			return m
		}
		t.Fatal("no message fetched")
		return nil
	}
	m := fetch()
	want("delivered", 0, 1, 0)
	if err := m.Nak(); err != nil {
		t.Fatal(err)
	}
	m = fetch()
	want("redelivered", 0, 1, 1)
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	want("acked", 0, 0, 0)
	publish("m1")
	publish("m2")
	want("published two more", 2, 0, 0)
}

func TestConsumerCollectorReportsDownForAMissingConsumer(t *testing.T) {
	env := natstest.Start(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(messaging.NewConsumerCollector(env.JS, messaging.CommandStream, "nope"))
	if got, ok := gauge(t, reg, "nodesmith_jetstream_consumer_up"); !ok || got != 0 {
		t.Fatalf("up = %v (present %v), want 0", got, ok)
	}
	if _, ok := gauge(t, reg, "nodesmith_jetstream_consumer_pending_messages"); ok {
		t.Fatal("pending reported for a consumer that does not exist")
	}
}
