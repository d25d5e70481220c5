package tracing_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/nodesmith/nodesmith/libs/tracing"
)

func TestEnabledFollowsTheStandardVariables(t *testing.T) {
	cases := []struct {
		exporter, endpoint, tracesEndpoint string
		want                               bool
	}{
		{want: false}, // off by default
		{exporter: "otlp", want: true},
		{endpoint: "http://collector:4317", want: true},
		{tracesEndpoint: "http://collector:4317", want: true},
		{exporter: "none", endpoint: "http://collector:4317", want: false},
	}
	for _, tc := range cases {
		t.Setenv("OTEL_TRACES_EXPORTER", tc.exporter)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tc.endpoint)
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", tc.tracesEndpoint)
		if got := tracing.Enabled(); got != tc.want {
			t.Errorf("%+v: Enabled() = %v", tc, got)
		}
	}
}

func TestSetupWithoutExportIsANoop(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	shutdown, err := tracing.Setup(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestHeadersCarryTheSpanContext(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	h := nats.Header{}
	tracing.Inject(trace.ContextWithSpanContext(context.Background(), sc), h)
	if h.Get("traceparent") == "" {
		t.Fatalf("no traceparent header: %v", h)
	}
	got := trace.SpanContextFromContext(tracing.Extract(context.Background(), h))
	if got.TraceID() != tid || got.SpanID() != sid || !got.IsRemote() {
		t.Fatalf("extracted %v, want the injected remote span context", got)
	}
	if ctx := tracing.Extract(context.Background(), nil); trace.SpanContextFromContext(ctx).IsValid() {
		t.Fatal("nil headers produced a span context")
	}
}
