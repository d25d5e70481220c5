package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	hookv1 "github.com/nodesmith/nodesmith/proto/nodesmith/hook/v1"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/libs/tracing"
	"github.com/nodesmith/nodesmith/libs/tracing/tracingtest"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/sshdtest"
)

// TestHookRunContinuesTheCommandsTrace publishes a hook command the way
// lifecycle does, with its span's context in the headers, and follows the
// trace: the replica's consumer span is that span's child, the SSH
// connection, the script and the result's publication are the consumer
// span's children, and the result event carries the trace on to lifecycle.
func TestHookRunContinuesTheCommandsTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("component test: NATS and sshd")
	}
	tp, rec := tracingtest.Record(t)
	env := natstest.Start(t)
	_, observer := env.ConnectAdmin(t) // reads the results no service but lifecycle may
	srv := sshdtest.Start(t, sshdtest.Options{})
	startReplica(t, env, srv, "runner-traced", nil)

	const secret = "join-token-must-not-be-traced"
	ctx, parent := tp.Tracer("test/lifecycle").Start(context.Background(), "lifecycle dispatch hook")
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := messaging.NewPublisher(env.JS).Publish(pctx, messaging.SubjectHookRun, "hook.ins-traced.2", &hookv1.RunHook{
		InstanceId: "ins-traced", Attempt: 2, Hook: hookv1.HookKind_HOOK_KIND_AFTER_CREATED, HookName: "join", Group: "workers",
		Host: "127.0.0.1", Script: "echo joining with $JOIN_TOKEN >/dev/null; exit 4", Env: map[string]string{"JOIN_TOKEN": secret},
	})
	parent.End()
	if err != nil {
		t.Fatal(err)
	}
	traceID := parent.SpanContext().TraceID()

	var resultMsg jetstream.Msg
	waitFor(t, "the hook result", func() bool {
		msgs := resultMessages(t, observer)
		if len(msgs) > 0 {
			resultMsg = msgs[0]
		}
		return resultMsg != nil
	})
	var res hookv1.HookResult
	if err := proto.Unmarshal(resultMsg.Data(), &res); err != nil {
		t.Fatal(err)
	}
	if res.GetExitCode() != 4 || res.GetInstanceId() != "ins-traced" {
		t.Fatalf("result = %v", &res)
	}

	var consumer, connect, run, publish sdktrace.ReadOnlySpan
	waitFor(t, "the hook's spans to end", func() bool {
		for _, s := range rec.Ended() {
			switch s.Name() {
			case "process " + messaging.SubjectHookRun:
				consumer = s
			case "ssh connect":
				connect = s
			case "ssh run":
				run = s
			case "publish " + resultSubject:
				publish = s
			}
		}
		return consumer != nil && connect != nil && run != nil && publish != nil
	})

	tracingtest.WantChildOf(t, consumer, parent.SpanContext())
	if consumer.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("consumer span kind %s", consumer.SpanKind())
	}
	tracingtest.WantAttrs(t, consumer, map[attribute.Key]attribute.Value{
		"nodesmith.instance":  attribute.StringValue("ins-traced"),
		"nodesmith.group":     attribute.StringValue("workers"),
		"nodesmith.hook":      attribute.StringValue("after_created"),
		"nodesmith.hook_name": attribute.StringValue("join"),
		"nodesmith.attempt":   attribute.Int64Value(2),
		"nodesmith.delivery":  attribute.Int64Value(1),
	})
	for _, child := range []sdktrace.ReadOnlySpan{connect, run, publish} {
		tracingtest.WantChildOf(t, child, consumer.SpanContext())
	}
	tracingtest.WantAttrs(t, connect, map[attribute.Key]attribute.Value{
		"nodesmith.result":           attribute.StringValue("ok"),
		"nodesmith.connect_attempts": attribute.IntValue(1),
		"server.address":             attribute.StringValue("127.0.0.1"),
		"nodesmith.host_key_policy":  attribute.StringValue("known_hosts"),
	})
	tracingtest.WantAttrs(t, run, map[attribute.Key]attribute.Value{
		"nodesmith.result":    attribute.StringValue("exit"),
		"nodesmith.exit_code": attribute.IntValue(4),
	})

	// The result event continues the trace from the publish span.
	sc := trace.SpanContextFromContext(tracing.Extract(context.Background(), resultMsg.Headers()))
	if sc.TraceID() != traceID || sc.SpanID() != publish.SpanContext().SpanID() {
		t.Errorf("result headers carry trace %s span %s, want trace %s span %s (the publish span)",
			sc.TraceID(), sc.SpanID(), traceID, publish.SpanContext().SpanID())
	}

	tracingtest.NoSecrets(t, rec.Ended(), secret)
}

// resultMessages returns the stored hook result messages, headers included.
func resultMessages(t *testing.T, js jetstream.JetStream) []jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, messaging.EventStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{resultSubject}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(100)
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	for m := range batch.Messages() {
		out = append(out, m)
	}
	return out
}
