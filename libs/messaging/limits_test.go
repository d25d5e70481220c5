package messaging_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
)

// A full command stream refuses new commands with an error the publisher
// can recognise and retry, keeps the commands it holds, delivers them,
// and takes the refused ones once the workers drained it.
func TestFullCommandStreamRefusesNewCommandsAndKeepsQueuedOnes(t *testing.T) {
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := messaging.DefaultOptions()
	o.CommandMaxMsgs = 3
	if err := messaging.Ensure(ctx, env.JS, o); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(messaging.NewStreamCollector(env.JS, messaging.CommandStream))

	pub := messaging.NewPublisher(env.JS)
	publish := func(id string) error {
		_, err := pub.Publish(ctx, messaging.SubjectHookRun, id, wrapperspb.String(id))
		return err
	}
	for i := range 3 {
		if err := publish(fmt.Sprintf("q%d", i)); err != nil {
			t.Fatalf("publishing q%d below the limit: %v", i, err)
		}
	}
	err := publish("late")
	if err == nil || !messaging.IsStreamFull(err) {
		t.Fatalf("publishing beyond the limit: err = %v, want a stream-full error", err)
	}
	if messaging.IsStreamFull(fmt.Errorf("other: %w", context.DeadlineExceeded)) {
		t.Error("IsStreamFull(deadline exceeded) = true")
	}
	if v, _ := gauge(t, reg, "nodesmith_jetstream_stream_usage_ratio"); v != 1 {
		t.Errorf("usage ratio of the full stream = %v, want 1", v)
	}
	if v, _ := gauge(t, reg, "nodesmith_jetstream_stream_max_messages"); v != 3 {
		t.Errorf("max messages = %v, want 3", v)
	}

	// The queued commands are all delivered, in order; acking them frees
	// the stream (work-queue retention) and the refused command goes in.
	_, hrjs := env.ConnectAs(t, natsauth.HookRunner) // the worker pulls
	cons, err := hrjs.Consumer(ctx, messaging.CommandStream, messaging.ConsumerHookRunner)
	if err != nil {
		t.Fatal(err)
	}
	receive := func(n int) []string {
		t.Helper()
		var got []string
		for len(got) < n {
			batch, err := cons.Fetch(n-len(got), jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for m := range batch.Messages() {
				got = append(got, m.Headers().Get(jetstream.MsgIDHeader))
				if err := m.DoubleAck(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := batch.Error(); err != nil {
				t.Fatal(err)
			}
		}
		return got
	}
	if got := receive(3); fmt.Sprint(got) != "[q0 q1 q2]" {
		t.Errorf("delivered %v, want the three queued commands", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := publish("late")
		if err == nil {
			break
		}
		if !messaging.IsStreamFull(err) || time.Now().After(deadline) {
			t.Fatalf("publishing after the drain: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := receive(1); fmt.Sprint(got) != "[late]" {
		t.Errorf("delivered %v, want the command refused before", got)
	}
}

// The command stream's limits and the instances bucket's marker TTL reach
// a topology created by an older version (no limits, DiscardOld, no TTL).
func TestEnsureAddsLimitsToAnExistingTopology(t *testing.T) {
	env := natstest.StartIn(t, t.TempDir(), false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := messaging.DefaultOptions()
	before.KVMarkerTTL = 0
	if err := messaging.Ensure(ctx, env.JS, before); err != nil {
		t.Fatal(err)
	}
	old := messaging.StreamConfigs(before)[0]
	old.MaxMsgs, old.MaxBytes, old.Discard = -1, -1, jetstream.DiscardOld
	if _, err := env.JS.UpdateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	o := messaging.DefaultOptions()
	o.CommandMaxMsgs, o.CommandMaxBytes, o.KVMarkerTTL = 10, 1<<20, time.Hour
	if err := messaging.Ensure(ctx, env.JS, o); err != nil {
		t.Fatal(err)
	}
	s, err := env.JS.Stream(ctx, messaging.CommandStream)
	if err != nil {
		t.Fatal(err)
	}
	if c := s.CachedInfo().Config; c.MaxMsgs != 10 || c.MaxBytes != 1<<20 || c.Discard != jetstream.DiscardNew {
		t.Errorf("command stream limits = %d msgs, %d bytes, discard %v; want 10, 1MiB, new", c.MaxMsgs, c.MaxBytes, c.Discard)
	}
	kv, err := env.JS.KeyValue(ctx, messaging.BucketInstances)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.(*jetstream.KeyValueBucketStatus).LimitMarkerTTL(); got != time.Hour {
		t.Errorf("instances bucket marker TTL = %s, want 1h", got)
	}
}
