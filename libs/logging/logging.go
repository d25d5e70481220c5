// Package logging sets up log/slog for nodesmith services: JSON in
// production, text for people, a level flag, and the trace and span ids of
// the record's context as attributes so logs and traces join up.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// Options configure New.
type Options struct {
	// Level: debug, info, warn or error.
	Level string
	// Format: json or text.
	Format string
	// Service is added to every record.
	Service string
	// Writer defaults to stderr.
	Writer io.Writer
}

// New returns a logger for o.
func New(o Options) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(strings.TrimSpace(o.Level))); err != nil && o.Level != "" {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", o.Level)
	}
	w := o.Writer
	if w == nil {
		w = os.Stderr
	}
	hopts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler
	switch o.Format {
	case "", "json":
		h = slog.NewJSONHandler(w, hopts)
	case "text":
		h = slog.NewTextHandler(w, hopts)
	default:
		return nil, fmt.Errorf("log format %q: want json or text", o.Format)
	}
	l := slog.New(traceHandler{h})
	if o.Service != "" {
		l = l.With("service", o.Service)
	}
	return l, nil
}

// traceHandler adds trace_id and span_id from the record's context.
type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(as)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}

// WithTrace returns l with the trace_id and span_id of ctx's span as
// attributes (l itself when ctx carries none): for a logger made once per
// message or request and then used without its context.
func WithTrace(ctx context.Context, l *slog.Logger) *slog.Logger {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return l
	}
	return l.With(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
}
