// Package telemetry is lifecycle's OpenTelemetry instrumentation scope:
// every span the service makes comes from Tracer, so one scope name finds
// them all in a trace backend.
package telemetry

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of lifecycle's spans.
const ScopeName = "nodesmith/lifecycle"

// Tracer returns the service's tracer from the global TracerProvider
// (installed by libs/tracing.Setup, or by a test). It is looked up on each
// use rather than once at start-up, so a provider installed later, or
// replaced by a test, takes effect.
func Tracer() trace.Tracer { return otel.Tracer(ScopeName) }
