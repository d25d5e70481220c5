package service_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/nodesmith/nodesmith/libs/tracing"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"

	"github.com/nodesmith/nodesmith/services/api-gateway/service"
)

// A trace started by CA's gRPC call continues through the gateway into the
// lifecycle request: server span per RPC, a client span for the lifecycle
// round trip, and its context in the NATS headers lifecycle receives. REST
// requests get server spans named after their route and continue an
// incoming trace.
func TestTracing(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	gw := startGatewayWith(t, nil, func(d *service.Deps) { d.TracerProvider = tp })

	conn, err := grpc.NewClient(gw.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// The caller's trace: a traceparent in the gRPC metadata.
	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callCtx := metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")
	if _, err := pb.NewCloudProviderClient(conn).NodeGroupIncreaseSize(callCtx, &pb.NodeGroupIncreaseSizeRequest{Id: "web", Delta: 1}); err != nil {
		t.Fatalf("IncreaseSize: %v", err)
	}
	if _, err := pb.NewCloudProviderClient(conn).NodeGroups(ctx, &pb.NodeGroupsRequest{}); err != nil {
		t.Fatalf("NodeGroups: %v", err)
	}

	spans := func() map[string]sdktrace.ReadOnlySpan {
		out := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			out[s.Name()] = s
		}
		return out
	}
	// Server spans end after the response is sent: poll for them.
	waitSpan := func(name string) sdktrace.ReadOnlySpan {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for spans()[name] == nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		return spans()[name]
	}
	server := waitSpan("clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/NodeGroupIncreaseSize")
	if server == nil || server.SpanKind() != trace.SpanKindServer {
		t.Fatalf("no server span for IncreaseSize; spans: %v", names(rec.Ended()))
	}
	if got := server.SpanContext().TraceID().String(); got != callerTrace {
		t.Errorf("server span trace %s, want the caller's %s", got, callerTrace)
	}
	if waitSpan("clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/NodeGroups") == nil {
		t.Errorf("no server span for NodeGroups (a read); spans: %v", names(rec.Ended()))
	}
	client := waitSpan("lifecycle increase_size")
	if client == nil || client.SpanKind() != trace.SpanKindClient {
		t.Fatalf("no client span for the lifecycle request; spans: %v", names(rec.Ended()))
	}
	if client.Parent().SpanID() != server.SpanContext().SpanID() {
		t.Errorf("lifecycle span's parent %s, want the RPC's span %s", client.Parent().SpanID(), server.SpanContext().SpanID())
	}

	// What lifecycle received continues the same trace.
	headers := gw.lifecycle.Headers()
	if len(headers) != 1 {
		t.Fatalf("lifecycle received %d requests, want 1", len(headers))
	}
	got := trace.SpanContextFromContext(tracing.Extract(context.Background(), headers[0]))
	if got.TraceID().String() != callerTrace || got.SpanID() != client.SpanContext().SpanID() {
		t.Errorf("lifecycle request carries span %s/%s, want %s/%s", got.TraceID(), got.SpanID(), callerTrace, client.SpanContext().SpanID())
	}

	// REST: a server span named after the route, continuing the caller's trace.
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+gw.addrs.REST+"/api/v1/nodegroups/web", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+readOnlyToken)
	req.Header.Set("traceparent", "00-"+callerTrace+"-00f067aa0ba902b8-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET nodegroup: %d", resp.StatusCode)
	}
	rs := waitSpan("GET /api/v1/nodegroups/{id}")
	if rs == nil {
		t.Fatalf("no REST server span named after the route; spans: %v", names(rec.Ended()))
	}
	if rs.SpanKind() != trace.SpanKindServer || rs.SpanContext().TraceID().String() != callerTrace || rs.Parent().SpanID().String() != "00f067aa0ba902b8" {
		t.Errorf("REST span kind %v trace %s parent %s", rs.SpanKind(), rs.SpanContext().TraceID(), rs.Parent().SpanID())
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}
