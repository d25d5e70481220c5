package grpcapi_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/nodesmith/nodesmith/libs/tracing"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/grpcapi"
)

// Every call gets a server span named <service>/<method> that continues
// the caller's trace, with the RPC's attributes, an error status only for
// the server's faults, and the handler running inside it.
func TestTracingInterceptor(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	icpt := grpcapi.TracingInterceptor(tp, tracing.Propagator)
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	info := &grpc.UnaryServerInfo{FullMethod: "/pkg.CloudProvider/NodeGroupTargetSize"}

	for _, tc := range []struct {
		name     string
		err      error
		code     codes.Code
		errorSet bool
	}{
		{"ok", nil, codes.OK, false},
		{"the caller's fault", status.Error(codes.NotFound, "no such group"), codes.NotFound, false},
		{"the server's fault", status.Error(codes.Internal, "boom"), codes.Internal, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec.Reset()
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01"))
			var inside trace.SpanContext
			_, err := icpt(ctx, nil, info, func(ctx context.Context, _ any) (any, error) {
				inside = trace.SpanContextFromContext(ctx)
				return nil, tc.err
			})
			if !errors.Is(err, tc.err) {
				t.Fatalf("the interceptor returned %v, want the handler's %v", err, tc.err)
			}
			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			s := spans[0]
			if s.Name() != "pkg.CloudProvider/NodeGroupTargetSize" || s.SpanKind() != trace.SpanKindServer {
				t.Errorf("span %q of kind %v", s.Name(), s.SpanKind())
			}
			if s.SpanContext().TraceID().String() != callerTrace || s.Parent().SpanID().String() != callerSpan {
				t.Errorf("span in trace %s with parent %s, want the caller's %s/%s", s.SpanContext().TraceID(), s.Parent().SpanID(), callerTrace, callerSpan)
			}
			if inside.SpanID() != s.SpanContext().SpanID() {
				t.Errorf("the handler ran in span %s, not the server span %s", inside.SpanID(), s.SpanContext().SpanID())
			}
			attrs := map[string]string{}
			for _, kv := range s.Attributes() {
				attrs[string(kv.Key)] = kv.Value.String()
			}
			want := map[string]string{"rpc.system": "grpc", "rpc.service": "pkg.CloudProvider", "rpc.method": "NodeGroupTargetSize", "rpc.grpc.status_code": strconv.Itoa(int(tc.code))}
			for k, v := range want {
				if attrs[k] != v {
					t.Errorf("attribute %s = %q, want %q", k, attrs[k], v)
				}
			}
			if got := s.Status().Code == otelcodes.Error; got != tc.errorSet {
				t.Errorf("span status %v, error status wanted: %v", s.Status(), tc.errorSet)
			}
		})
	}

	// Without a caller's trace the span is a root.
	rec.Reset()
	if _, err := icpt(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if spans := rec.Ended(); len(spans) != 1 || spans[0].Parent().IsValid() {
		t.Errorf("a call without trace context: %d spans, want 1 root span", len(spans))
	}
}

// With tracing off (a no-op provider) a call costs next to nothing: CA
// makes tens of thousands per loop.
func TestTracingInterceptorIsCheapWhenNotRecording(t *testing.T) {
	icpt := grpcapi.TracingInterceptor(noop.NewTracerProvider(), tracing.Propagator)
	info := &grpc.UnaryServerInfo{FullMethod: "/pkg.CloudProvider/NodeGroupTargetSize"}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("user-agent", "cluster-autoscaler"))
	handler := func(context.Context, any) (any, error) { return nil, nil }
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := icpt(ctx, nil, info, handler); err != nil {
			t.Fatal(err)
		}
	})
	// The carrier handed to the propagator and the span's context.
	if allocs > 2 {
		t.Errorf("%v allocations per call without a recorded span, want at most 2", allocs)
	}
}
