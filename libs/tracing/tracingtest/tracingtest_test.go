package tracingtest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

func TestRecordCapturesGlobalSpansAndRestores(t *testing.T) {
	prev := otel.GetTracerProvider()
	t.Run("recording", func(t *testing.T) {
		_, rec := Record(t)
		_, span := otel.Tracer("x").Start(context.Background(), "op")
		span.End()
		if got := rec.Ended(); len(got) != 1 || got[0].Name() != "op" {
			t.Fatalf("recorded %v", got)
		}
	})
	if otel.GetTracerProvider() != prev {
		t.Error("the previous provider was not restored")
	}
}

// errorsOf is a testing.TB that only counts Errorf calls.
type errorsOf struct {
	testing.TB
	n int
}

func (e *errorsOf) Helper()               {}
func (e *errorsOf) Errorf(string, ...any) { e.n++ }

func TestWantAttrsAndNoSecretsReport(t *testing.T) {
	_, rec := Record(t)
	_, span := otel.Tracer("x").Start(context.Background(), "op", trace.WithAttributes(attribute.String("k", "v")))
	span.AddEvent("e", trace.WithAttributes(attribute.String("body", "has hunter2 inside")))
	span.End()
	sp := rec.Ended()[0]

	tb := &errorsOf{TB: t}
	WantAttrs(tb, sp, map[attribute.Key]attribute.Value{"k": attribute.StringValue("v")})
	NoSecrets(tb, rec.Ended(), "not-there")
	if tb.n != 0 {
		t.Fatalf("%d errors for a span that matches", tb.n)
	}
	WantAttrs(tb, sp, map[attribute.Key]attribute.Value{"k": attribute.StringValue("w"), "missing": attribute.IntValue(1)})
	if tb.n != 2 {
		t.Errorf("WantAttrs reported %d differences, want 2", tb.n)
	}
	tb.n = 0
	NoSecrets(tb, rec.Ended(), "hunter2")
	if tb.n != 1 {
		t.Errorf("NoSecrets reported %d leaks, want the event's 1", tb.n)
	}
}

func TestWantChildOfReportsAnotherParentOrTrace(t *testing.T) {
	_, rec := Record(t)
	ctx, parent := otel.Tracer("x").Start(context.Background(), "parent")
	_, child := otel.Tracer("x").Start(ctx, "child")
	child.End()
	_, other := otel.Tracer("x").Start(context.Background(), "other root")
	other.End()
	parent.End()
	byName := func(name string) int {
		for i, s := range rec.Ended() {
			if s.Name() == name {
				return i
			}
		}
		t.Fatalf("no span %q", name)
		return -1
	}
	spans := rec.Ended()
	tb := &errorsOf{TB: t}
	WantChildOf(tb, spans[byName("child")], parent.SpanContext())
	if tb.n != 0 {
		t.Fatalf("%d errors for the parent's own child", tb.n)
	}
	WantChildOf(tb, spans[byName("other root")], parent.SpanContext())
	WantChildOf(tb, spans[byName("parent")], parent.SpanContext())
	if tb.n != 2 {
		t.Errorf("WantChildOf reported %d of 2 spans that are not the parent's children", tb.n)
	}
}
