package grpcapi

import (
	"context"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Metrics are the per-RPC metrics of the gRPC server.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// methods holds each method's series, resolved on its first call
	// (full method name -> *methodMetrics): CA's loop makes tens of
	// thousands of calls, and a label lookup per call and series is
	// wasted work.
	methods sync.Map
}

// methodMetrics are one method's series.
type methodMetrics struct {
	name     string
	duration prometheus.Observer
	// ok is the counter of its OK calls, resolved on the first OK call
	// (a method that never succeeded shows no OK series, as before).
	ok atomic.Pointer[prometheus.Counter]
}

// method returns the series of fullMethod ("/<service>/<method>").
func (m *Metrics) method(fullMethod string) *methodMetrics {
	if mm, ok := m.methods.Load(fullMethod); ok {
		return mm.(*methodMetrics)
	}
	name := fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
	mm, _ := m.methods.LoadOrStore(fullMethod, &methodMetrics{name: name, duration: m.duration.WithLabelValues(name)})
	return mm.(*methodMetrics)
}

// count counts one call of mm ending with code.
func (m *Metrics) count(mm *methodMetrics, code codes.Code) {
	if code != codes.OK {
		m.requests.WithLabelValues(mm.name, code.String()).Inc()
		return
	}
	c := mm.ok.Load()
	if c == nil {
		ok := m.requests.WithLabelValues(mm.name, codes.OK.String())
		c = &ok
		mm.ok.Store(c)
	}
	(*c).Inc()
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
		mm := m.method(info.FullMethod)
		method := mm.name
		start := time.Now()
		defer func() {
			if p := recover(); p != nil {
				log.ErrorContext(ctx, "panic in gRPC handler", "method", method, "panic", p, "stack", string(debug.Stack()))
				resp, err = nil, status.Error(codes.Internal, "internal error")
			}
			code := status.Code(err)
			mm.duration.Observe(time.Since(start).Seconds())
			m.count(mm, code)
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

// TracerName names the tracer of the gRPC server spans.
const TracerName = "github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/grpcapi"

// serverSpan are the options of every server span, built once: a call
// must not allocate them.
var serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// TracingInterceptor starts a server span per call, named
// "<service>/<method>", continuing the caller's trace context (W3C
// traceparent and baggage in the metadata, read with prop); the handler,
// and the lifecycle request it may make, run inside it. Attributes and
// status are set only on spans that are recorded.
//
// It replaces otelgrpc's stats handler, which cost every call ~20us of
// CPU even with tracing off (B1, issue 21): Cluster Autoscaler makes
// several calls per node per loop, tens of thousands at 10k nodes, and a
// call without a recorded span must cost next to nothing.
func TracingInterceptor(tp trace.TracerProvider, prop propagation.TextMapPropagator) grpc.UnaryServerInterceptor {
	tracer := tp.Tracer(TracerName)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		name := strings.TrimPrefix(info.FullMethod, "/")
		ctx = prop.Extract(ctx, incomingCarrier{ctx})
		ctx, span := tracer.Start(ctx, name, serverSpan...)
		resp, err := handler(ctx, req)
		if span.IsRecording() {
			service, method, _ := strings.Cut(name, "/")
			code := status.Code(err)
			span.SetAttributes(semconv.RPCSystemGRPC, semconv.RPCService(service), semconv.RPCMethod(method), semconv.RPCGRPCStatusCodeKey.Int(int(code)))
			if serverFault(code) {
				span.SetStatus(otelcodes.Error, status.Convert(err).Message())
			}
		}
		span.End()
		return resp, err
	}
}

// serverFault reports whether a status code is the server's fault, which
// OpenTelemetry's conventions mark as an error on server spans; the
// others (NotFound, InvalidArgument, ...) are the caller's.
func serverFault(c codes.Code) bool {
	switch c {
	case codes.Unknown, codes.DeadlineExceeded, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss:
		return true
	}
	return false
}

// incomingCarrier reads a call's incoming metadata for a propagator
// without copying it (metadata.FromIncomingContext copies every header).
type incomingCarrier struct{ ctx context.Context }

func (c incomingCarrier) Get(key string) string {
	if v := metadata.ValueFromIncomingContext(c.ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (incomingCarrier) Set(string, string) {}

func (c incomingCarrier) Keys() []string {
	md, _ := metadata.FromIncomingContext(c.ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	return keys
}
