package tracingtest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
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
