// Package tracingtest records the spans a test produces.
package tracingtest

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/nodesmith/nodesmith/libs/tracing"
)

// Record installs a TracerProvider that samples and records every span as
// the global one (what tracing.Setup does in production; services take
// their tracers from it) until the test ends, when the previous provider
// is restored. Tests using it must not run in parallel with each other.
func Record(t testing.TB) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	prev, wasInstalled := otel.GetTracerProvider(), tracing.Installed()
	tracing.Install(tp)
	t.Cleanup(func() {
		tracing.Uninstall(prev, wasInstalled)
		_ = tp.Shutdown(context.Background())
	})
	return tp, rec
}

// WantAttrs reports (t.Errorf) each attribute of want that span lacks or
// holds with another value.
func WantAttrs(t testing.TB, span sdktrace.ReadOnlySpan, want map[attribute.Key]attribute.Value) {
	t.Helper()
	got := map[attribute.Key]attribute.Value{}
	for _, kv := range span.Attributes() {
		got[kv.Key] = kv.Value
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("span %q: %s = %v, want %v", span.Name(), k, g.String(), v.String())
		}
	}
}

// WantChildOf reports (t.Errorf) span unless it belongs to parent's trace
// and parent is its direct parent.
func WantChildOf(t testing.TB, span sdktrace.ReadOnlySpan, parent trace.SpanContext) {
	t.Helper()
	if span.SpanContext().TraceID() != parent.TraceID() || span.Parent().SpanID() != parent.SpanID() {
		t.Errorf("span %q: trace %s parent %s, want trace %s parent %s",
			span.Name(), span.SpanContext().TraceID(), span.Parent().SpanID(), parent.TraceID(), parent.SpanID())
	}
}

// NoSecrets reports (t.Errorf) every attribute of the spans, or of their
// events, whose value contains one of the secrets.
func NoSecrets(t testing.TB, spans []sdktrace.ReadOnlySpan, secrets ...string) {
	t.Helper()
	leaks := func(v attribute.Value) bool {
		s := v.String()
		for _, secret := range secrets {
			if strings.Contains(s, secret) {
				return true
			}
		}
		return false
	}
	for _, sp := range spans {
		for _, kv := range sp.Attributes() {
			if leaks(kv.Value) {
				t.Errorf("span %q attribute %s leaks a secret", sp.Name(), kv.Key)
			}
		}
		for _, ev := range sp.Events() {
			for _, kv := range ev.Attributes {
				if leaks(kv.Value) {
					t.Errorf("span %q event %q attribute %s leaks a secret", sp.Name(), ev.Name, kv.Key)
				}
			}
		}
	}
}
