package service_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/tracing"
	"github.com/nodesmith/nodesmith/libs/tracing/tracingtest"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/service"
)

// TestCommandSpansContinueTheTrace publishes a create command the way
// lifecycle does, with its span's context in the headers, and follows the
// trace through the replica: the consumer span is that span's child, every
// CVM call (real SDK against the emulator) and every event publication is
// the consumer span's child, the rate limiter's wait is on the call spans,
// and the created events carry the trace on to lifecycle.
func TestCommandSpansContinueTheTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("component test: waits for the rate limiter")
	}
	tp, rec := tracingtest.Record(t)
	srv := startEmulator(t, nil)
	s := newStack(t)
	cfg := emulatorConfig(srv)
	// One RunInstances token every two seconds: the batch's second chunk
	// has to wait for the limiter.
	cfg.TencentRateLimits = "RunInstances=0.5:1,DescribeInstances=16:4,TerminateInstances=8:2"
	r := s.startReplica("traced", cfg, service.Deps{Environ: credentialsEnv})
	r.waitReady(t)

	const loginPassword = "Login-Passw0rd-never-traced"
	cmd := createCommand(provider, "bt", 101) // two RunInstances calls
	cmd.GetCreate().ParametersJson = `{"InstanceType":"S5.MEDIUM4","ImageId":"img-test","Placement":{"Zone":"ap-guangzhou-3"},` +
		`"LoginSettings":{"Password":"` + loginPassword + `"}}`
	ctx, parent := tp.Tracer("test/lifecycle").Start(context.Background(), "lifecycle dispatch create")
	s.publishCtx(ctx, messaging.SubjectCloudCreate, "create.bt", cmd)
	parent.End()
	traceID := parent.SpanContext().TraceID()

	eventually(t, 60*time.Second, "two created events", func() bool { _, n := s.createdMapping(); return n == 2 })
	const consumerName = "process " + messaging.SubjectCloudCreate
	var consumer sdktrace.ReadOnlySpan
	eventually(t, 30*time.Second, "the command's span to end", func() bool {
		for _, sp := range rec.Ended() {
			if sp.Name() == consumerName {
				consumer = sp
			}
		}
		return consumer != nil
	})
	tracingtest.WantChildOf(t, consumer, parent.SpanContext())
	if consumer.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("consumer span kind %s", consumer.SpanKind())
	}
	tracingtest.WantAttrs(t, consumer, map[attribute.Key]attribute.Value{
		"nodesmith.command":        attribute.StringValue("create"),
		"nodesmith.batch":          attribute.StringValue("bt"),
		"nodesmith.group":          attribute.StringValue("g1"),
		"nodesmith.attempt":        attribute.Int64Value(1),
		"nodesmith.instance_count": attribute.IntValue(101),
		"nodesmith.delivery":       attribute.Int64Value(1),
		"nodesmith.outcome":        attribute.StringValue("done"),
		"cloud.provider":           attribute.StringValue(provider),
		"cloud.account.id":         attribute.StringValue("acct"),
		"cloud.region":             attribute.StringValue("ap-guangzhou"),
	})

	var calls, publishes []sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.Parent().SpanID() != consumer.SpanContext().SpanID() {
			continue
		}
		switch sp.Name() {
		case "cvm RunInstances":
			calls = append(calls, sp)
		case "publish " + messaging.SubjectCloudEvents + ".created":
			publishes = append(publishes, sp)
		}
	}
	if len(calls) != 2 || len(publishes) != 2 {
		t.Fatalf("children of the consumer span: %d RunInstances calls and %d publications, want 2 and 2", len(calls), len(publishes))
	}
	waited := false
	for _, c := range calls {
		if c.SpanKind() != trace.SpanKindClient {
			t.Errorf("call span kind %s", c.SpanKind())
		}
		tracingtest.WantAttrs(t, c, map[attribute.Key]attribute.Value{
			"rpc.method":              attribute.StringValue("RunInstances"),
			"cloud.account.id":        attribute.StringValue("acct"),
			"cloud.region":            attribute.StringValue("ap-guangzhou"),
			"nodesmith.result":        attribute.StringValue("ok"),
			"nodesmith.call_attempts": attribute.IntValue(1),
		})
		for _, ev := range c.Events() {
			for _, kv := range ev.Attributes {
				if ev.Name == "rate limiter wait" && kv.Key == "nodesmith.rate_limit.wait_seconds" && kv.Value.AsFloat64() > 0 {
					waited = true
				}
			}
		}
	}
	if !waited {
		t.Error("no RunInstances span records a rate limiter wait, but the second call had to wait for a token")
	}

	// Each created event continues the trace from its publication span.
	publishIDs := map[trace.SpanID]bool{}
	for _, p := range publishes {
		publishIDs[p.SpanContext().SpanID()] = true
	}
	for _, e := range s.recorded() {
		if e.ev.GetCreated() == nil {
			continue
		}
		sc := trace.SpanContextFromContext(tracing.Extract(context.Background(), e.header))
		if sc.TraceID() != traceID || !publishIDs[sc.SpanID()] {
			t.Errorf("created event %s carries trace %s span %s, want trace %s from a publish span", e.msgID, sc.TraceID(), sc.SpanID(), traceID)
		}
	}

	tracingtest.NoSecrets(t, rec.Ended(), loginPassword, "test-secret")
}
