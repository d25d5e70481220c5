package grpcapi

import (
	"context"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Metrics are the per-RPC metrics of the gRPC server.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics registers the gRPC metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_gateway_grpc_requests_total",
			Help: "gRPC requests handled, by method and status code.",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "nodesmith_gateway_grpc_request_duration_seconds",
			Help: "gRPC request latency, by method. Reads are served from memory; mutations include the lifecycle round trip.",
			// From 25us (reads) to 5s (CA's default grpc_timeout).
			Buckets: []float64{.000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"method"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration)
	}
	return m
}

// UnaryInterceptor records metrics, turns a panic into codes.Internal (one
// bad request must not take the server down while CA keeps calling), and
// logs internal errors.
func UnaryInterceptor(m *Metrics, log *slog.Logger) grpc.UnaryServerInterceptor {
	if m == nil {
		m = NewMetrics(nil)
	}
	if log == nil {
		log = slog.Default()
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
		start := time.Now()
		defer func() {
			if p := recover(); p != nil {
				log.ErrorContext(ctx, "panic in gRPC handler", "method", method, "panic", p, "stack", string(debug.Stack()))
				resp, err = nil, status.Error(codes.Internal, "internal error")
			}
			code := status.Code(err)
			m.duration.WithLabelValues(method).Observe(time.Since(start).Seconds())
			m.requests.WithLabelValues(method, code.String()).Inc()
			// Mutations log their outcome with group and delta in the app
			// layer; here only faults are worth more than debug.
			switch code {
			case codes.OK:
			case codes.Internal, codes.Unknown, codes.DataLoss:
				log.ErrorContext(ctx, "gRPC request failed", "method", method, "code", code.String(), "err", status.Convert(err).Message())
			default:
				log.DebugContext(ctx, "gRPC request not served", "method", method, "code", code.String(), "err", status.Convert(err).Message())
			}
		}()
		return handler(ctx, req)
	}
}
