package tracing

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// Enabled reports whether the standard OTEL_* environment asks for trace
// export: OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint is set and the
// exporter is not "none". Tracing is off by default.
func Enabled() bool {
	switch os.Getenv("OTEL_TRACES_EXPORTER") {
	case "none":
		return false
	case "otlp":
		return true
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs the W3C propagator and, when Enabled, an OTLP/gRPC span
// exporter configured by the standard OTEL_* variables. The returned function
// flushes and stops the exporter.
func Setup(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(Propagator)
	if !Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("creating OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err != nil {
		return nil, fmt.Errorf("building trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	Install(tp)
	return tp.Shutdown, nil
}

// installed is whether Install put a provider in place.
var installed atomic.Bool

// Install makes tp the global TracerProvider the services take their
// tracers from, and says so to Installed. Setup calls it when export is
// asked for; tests recording spans call it too (tracingtest.Record).
func Install(tp trace.TracerProvider) {
	otel.SetTracerProvider(tp)
	installed.Store(true)
}

// Installed reports whether a TracerProvider was put in place with
// Install (and not taken back with Uninstall). Without one, spans are made
// by the global no-op provider and recorded nowhere: a hot path may skip
// making them at all.
func Installed() bool { return installed.Load() }

// Uninstall puts prev back as the global TracerProvider, prev having been
// the global one before Install (wasInstalled: what Installed said then).
func Uninstall(prev trace.TracerProvider, wasInstalled bool) {
	otel.SetTracerProvider(prev)
	installed.Store(wasInstalled)
}
