package messaging_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
)

func TestEnsureIsIdempotentAndComplete(t *testing.T) {
	env := natstest.Start(t) // runs Ensure once
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A second and a concurrent third call converge without error.
	errc := make(chan error, 2)
	for range 2 {
		go func() { errc <- messaging.Ensure(ctx, env.JS, messaging.DefaultOptions()) }()
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatalf("Ensure again: %v", err)
		}
	}

	cmd, err := env.JS.Stream(ctx, messaging.CommandStream)
	if err != nil {
		t.Fatal(err)
	}
	if cmd.CachedInfo().Config.Retention != jetstream.WorkQueuePolicy {
		t.Errorf("command stream retention = %v, want work queue", cmd.CachedInfo().Config.Retention)
	}
	if cmd.CachedInfo().Config.Duplicates != messaging.DefaultOptions().DuplicateWindow {
		t.Errorf("duplicate window = %v", cmd.CachedInfo().Config.Duplicates)
	}
	for _, name := range []string{messaging.ConsumerCloudAdapter, messaging.ConsumerHookRunner} {
		c, err := cmd.Consumer(ctx, name)
		if err != nil {
			t.Fatalf("consumer %s: %v", name, err)
		}
		cfg := c.CachedInfo().Config
		if cfg.AckPolicy != jetstream.AckExplicitPolicy || cfg.MaxDeliver < 2 || cfg.MaxAckPending < 1 {
			t.Errorf("consumer %s config: %+v", name, cfg)
		}
		if len(cfg.BackOff) != 0 {
			t.Errorf("consumer %s has BackOff %v: it would replace AckWait as the first ack deadline", name, cfg.BackOff)
		}
	}
	ev, err := env.JS.Stream(ctx, messaging.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ev.Consumer(ctx, messaging.ConsumerLifecycle); err != nil {
		t.Fatalf("lifecycle consumer: %v", err)
	}
	for _, b := range []string{messaging.BucketGroups, messaging.BucketInstances, messaging.BucketCatalog} {
		if _, err := env.JS.KeyValue(ctx, b); err != nil {
			t.Errorf("bucket %s: %v", b, err)
		}
	}
}

// Ensure writes only what differs: services start together and each runs
// it, and a stream rewritten while another service adds a consumer to it
// trips a data race inside nats-server. An unchanged topology updates
// nothing; a changed option updates exactly what it touches.
func TestEnsureUpdatesOnlyWhatDiffers(t *testing.T) {
	// A server without nodesmith's identities: the test watches JetStream
	// advisories and makes a marker stream, which no identity may.
	nc, js := natstest.StartPlain(t)
	env := struct {
		Conn *nats.Conn
		JS   jetstream.JetStream
	}{nc, js}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := messaging.Ensure(ctx, env.JS, messaging.DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	updates, err := env.Conn.SubscribeSync("$JS.EVENT.ADVISORY.STREAM.UPDATED.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := messaging.Ensure(ctx, env.JS, messaging.DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	changed := messaging.DefaultOptions()
	changed.DuplicateWindow += time.Minute // both streams
	changed.CloudAckWait += time.Second    // one consumer
	if err := messaging.Ensure(ctx, env.JS, changed); err != nil {
		t.Fatal(err)
	}
	// Advisories arrive in the order of the writes: a marker stream updated
	// last closes the list of what the two Ensure calls wrote.
	marker := jetstream.StreamConfig{Name: "MARKER", Subjects: []string{"marker"}, Storage: jetstream.MemoryStorage}
	if _, err := env.JS.CreateStream(ctx, marker); err != nil {
		t.Fatal(err)
	}
	marker.Description = "updated last"
	if _, err := env.JS.UpdateStream(ctx, marker); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		m, err := updates.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		name := strings.TrimPrefix(m.Subject, "$JS.EVENT.ADVISORY.STREAM.UPDATED.")
		if name == marker.Name {
			break
		}
		got = append(got, name)
	}
	slices.Sort(got)
	if want := []string{messaging.CommandStream, messaging.EventStream}; !slices.Equal(got, want) {
		t.Errorf("streams updated %q, want only %q (the duplicate window changed)", got, want)
	}
	c, err := env.JS.Consumer(ctx, messaging.CommandStream, messaging.ConsumerCloudAdapter)
	if err != nil {
		t.Fatal(err)
	}
	if c.CachedInfo().Config.AckWait != changed.CloudAckWait {
		t.Errorf("cloud consumer ack wait %s, want the changed %s", c.CachedInfo().Config.AckWait, changed.CloudAckWait)
	}
}

func TestCommandsRouteToDisjointConsumersAndDedup(t *testing.T) {
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub := messaging.NewPublisher(env.JS)
	for _, s := range []string{messaging.SubjectCloudCreate, messaging.SubjectHookRun} {
		for range 3 { // same id three times: stored once
			if _, err := pub.Publish(ctx, s, "id-"+s, wrapperspb.String("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	for consumer, subject := range map[string]string{
		messaging.ConsumerCloudAdapter: messaging.SubjectCloudCreate,
		messaging.ConsumerHookRunner:   messaging.SubjectHookRun,
	} {
		// Each worker pulls as itself.
		_, wjs := env.ConnectAs(t, natsauth.Identity(consumer))
		c, err := wjs.Consumer(ctx, messaging.CommandStream, consumer)
		if err != nil {
			t.Fatal(err)
		}
		batch, err := c.Fetch(10, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if m.Subject() != subject {
				t.Errorf("%s got %s", consumer, m.Subject())
			}
			_ = m.Ack()
		}
		if n != 1 {
			t.Errorf("%s got %d messages, want 1 (dedup by message id)", consumer, n)
		}
	}
}

func TestValidateRejectsBadOptions(t *testing.T) {
	for name, mut := range map[string]func(*messaging.Options){
		"replicas":    func(o *messaging.Options) { o.Replicas = 0 },
		"dup window":  func(o *messaging.Options) { o.DuplicateWindow = 0 },
		"ack wait":    func(o *messaging.Options) { o.HookAckWait = 10 * time.Millisecond },
		"max deliver": func(o *messaging.Options) { o.MaxDeliver = 1 },
		"ack pending": func(o *messaging.Options) { o.CloudMaxAckPending = 0 },
	} {
		o := messaging.DefaultOptions()
		mut(&o)
		if err := o.Validate(); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
	if err := messaging.DefaultOptions().Validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
}

// A service that starts while JetStream is not available yet (NATS
// restarting) waits for it instead of failing its start.
func TestEnsureWaitsForJetStream(t *testing.T) {
	ns := natstest.RunServer(t, &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true})
	_, js := natstest.Dial(t, ns.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- messaging.Ensure(ctx, js, messaging.DefaultOptions()) }()
	// JetStream comes up only after Ensure has met it missing.
	select {
	case err := <-errc:
		t.Fatalf("Ensure returned before JetStream was enabled: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := ns.EnableJetStream(&server.JetStreamConfig{StoreDir: t.TempDir(), MaxMemory: 1 << 30, MaxStore: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Ensure after JetStream came up: %v", err)
	}
	if _, err := js.Stream(ctx, messaging.CommandStream); err != nil {
		t.Fatalf("command stream: %v", err)
	}
}

// A topology the server refuses is not retried.
func TestEnsureFailsFastOnRefusedTopology(t *testing.T) {
	ns := natstest.RunServer(t, &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true})
	if err := ns.EnableJetStream(&server.JetStreamConfig{StoreDir: t.TempDir(), MaxMemory: 1 << 30, MaxStore: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	_, js := natstest.Dial(t, ns.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The command stream exists in memory: a stream's storage cannot be
	// changed, so the server refuses the file-backed one Ensure declares.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: messaging.CommandStream, Subjects: []string{"other.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	err := messaging.Ensure(ctx, js, messaging.DefaultOptions())
	if err == nil {
		t.Fatal("Ensure succeeded over a conflicting stream")
	}
	if ctx.Err() != nil {
		t.Fatalf("Ensure retried a refusal until its context ended: %v", err)
	}
}

// A request lost with its answer (NATS restarting under the caller) ends
// its attempt, not the whole Ensure: the next attempt succeeds well before
// the caller's deadline.
func TestEnsureRetriesALostRequest(t *testing.T) {
	defer messaging.SetEnsureAttemptTimeout(300 * time.Millisecond)()
	ns := natstest.RunServer(t, &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true})
	nc, js := natstest.Dial(t, ns.ClientURL())
	// Something takes the JetStream API requests and never answers.
	sink, err := nc.Subscribe("$JS.API.>", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- messaging.Ensure(ctx, js, messaging.DefaultOptions()) }()
	time.Sleep(time.Second) // a few attempts lost
	if err := sink.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := ns.EnableJetStream(&server.JetStreamConfig{StoreDir: t.TempDir(), MaxMemory: 1 << 30, MaxStore: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Ensure only ended with its caller's deadline")
	}
}

// A durable consumer made by an older version (a minute's ack wait, the
// old default) is updated in place by Ensure: its AckWait becomes the new
// value, and a command delivered before the update, whose replica died,
// is redelivered under the new ack wait rather than the old one.
func TestEnsureUpdatesAnExistingConsumersAckWait(t *testing.T) {
	env := natstest.StartIn(t, t.TempDir(), false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	old := messaging.DefaultOptions()
	old.CloudAckWait = 10 * time.Minute
	if err := messaging.Ensure(ctx, env.JS, old); err != nil {
		t.Fatal(err)
	}
	if _, err := messaging.NewPublisher(env.JS).Publish(ctx, messaging.SubjectCloudCreate, "create.b1", wrapperspb.String("x")); err != nil {
		t.Fatal(err)
	}
	_, cajs := env.ConnectAs(t, natsauth.CloudAdapter)
	cons, err := cajs.Consumer(ctx, messaging.CommandStream, messaging.ConsumerCloudAdapter)
	if err != nil {
		t.Fatal(err)
	}
	// Delivered to a "replica" that never acks it.
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range batch.Messages() {
		n++
	}
	if n != 1 {
		t.Fatalf("first fetch got %d messages, want 1", n)
	}

	upgraded := messaging.DefaultOptions()
	upgraded.CloudAckWait = time.Second
	if err := messaging.Ensure(ctx, env.JS, upgraded); err != nil {
		t.Fatalf("Ensure over the old consumer: %v", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.AckWait != time.Second {
		t.Fatalf("consumer AckWait = %v after Ensure, want 1s", info.Config.AckWait)
	}
	if info.NumAckPending != 1 {
		t.Fatalf("ack pending = %d after the update, want the delivered command (1)", info.NumAckPending)
	}

	// The old ack wait (10m) is far beyond this test's deadline: only the
	// new one can bring the command back.
	start := time.Now()
	for {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var got jetstream.Msg
		for m := range batch.Messages() {
			got = m
		}
		if got != nil {
			meta, err := got.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			if meta.NumDelivered != 2 {
				t.Fatalf("redelivered command has NumDelivered %d, want 2", meta.NumDelivered)
			}
			t.Logf("redelivered %s after the update", time.Since(start).Round(time.Millisecond))
			_ = got.Ack()
			return
		}
		if ctx.Err() != nil {
			t.Fatal("the command delivered before the update was not redelivered under the new ack wait")
		}
	}
}
