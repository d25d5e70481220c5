package grpcapi_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/grpcapi"
)

// panicky is a service whose stream method panics.
var panicky = grpc.ServiceDesc{
	ServiceName: "test.Panicky",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Boom",
		ServerStreams: true,
		Handler:       func(any, grpc.ServerStream) error { panic("boom in a stream") },
	}},
}

// A panic in a stream handler answers codes.Internal, is counted, and
// leaves the server serving (a real server over loopback).
func TestStreamInterceptorRecovers(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := grpcapi.NewMetrics(reg)
	srv := grpc.NewServer(grpc.ChainStreamInterceptor(grpcapi.StreamInterceptor(m, nil)))
	srv.RegisterService(&panicky, struct{}{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)

	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 2 { // the server survives the first panic
		st, err := conn.NewStream(ctx, &panicky.Streams[0], "/test.Panicky/Boom")
		if err != nil {
			t.Fatal(err)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		err = st.RecvMsg(new(healthpb.HealthCheckResponse))
		if status.Code(err) != codes.Internal || strings.Contains(status.Convert(err).Message(), "boom") {
			t.Fatalf("panicking stream: %v, want Internal without the panic text", err)
		}
	}
	const want = `
# HELP nodesmith_gateway_grpc_requests_total gRPC requests handled, by method and status code.
# TYPE nodesmith_gateway_grpc_requests_total counter
nodesmith_gateway_grpc_requests_total{code="Internal",method="Boom"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "nodesmith_gateway_grpc_requests_total"); err != nil {
		t.Fatal(err)
	}
}

// Without a verified client certificate (no TLS at all here) the
// allow-list denies every method but health.
func TestClientAllowListNeedsVerifiedCertificate(t *testing.T) {
	allow := grpcapi.NewClientAllowList([]string{"spiffe://cluster.local/ns/nodesmith/sa/cluster-autoscaler"}, nil)
	called := false
	h := func(context.Context, any) (any, error) { called = true; return nil, nil }
	_, err := allow.Unary()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/x.CloudProvider/NodeGroups"}, h)
	if status.Code(err) != codes.PermissionDenied || called {
		t.Fatalf("no peer certificate: %v (handler called %v)", err, called)
	}
	if _, err := allow.Unary()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: grpcapi.HealthServicePrefix + "Check"}, h); err != nil || !called {
		t.Fatalf("health: %v (handler called %v)", err, called)
	}
}
