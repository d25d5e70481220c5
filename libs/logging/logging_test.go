package logging_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/nodesmith/nodesmith/libs/logging"
)

func spanCtx(t *testing.T) (context.Context, trace.SpanContext) {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	return trace.ContextWithSpanContext(context.Background(), sc), sc
}

func records(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(buf.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON log line: %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestJSONRecordsCarryServiceAndTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	log, err := logging.New(logging.Options{Level: "info", Format: "json", Service: "svc", Writer: &buf})
	if err != nil {
		t.Fatal(err)
	}
	ctx, sc := spanCtx(t)
	log.InfoContext(ctx, "with a span", "instance", "i-1", "group", "g", "state", "Running")
	log.Info("without a span")
	logging.WithTrace(ctx, log).Warn("a logger made for one message")
	log.Debug("below the level")

	recs := records(t, &buf)
	if len(recs) != 3 {
		t.Fatalf("got %d records, want 3 (debug filtered out): %s", len(recs), buf.String())
	}
	for i, want := range []bool{true, false, true} {
		r := recs[i]
		if r["service"] != "svc" {
			t.Errorf("record %d: service %v", i, r["service"])
		}
		_, has := r["trace_id"]
		if has != want {
			t.Errorf("record %d (%v): trace_id present %v, want %v", i, r["msg"], has, want)
		}
		if want && (r["trace_id"] != sc.TraceID().String() || r["span_id"] != sc.SpanID().String()) {
			t.Errorf("record %d: trace_id %v span_id %v, want %s %s", i, r["trace_id"], r["span_id"], sc.TraceID(), sc.SpanID())
		}
	}
	if recs[0]["instance"] != "i-1" || recs[0]["group"] != "g" || recs[0]["state"] != "Running" {
		t.Errorf("attributes lost: %v", recs[0])
	}
	if logging.WithTrace(context.Background(), log) != log {
		t.Error("WithTrace without a span should return the logger unchanged")
	}
}

func TestTextFormatAndGroupsKeepTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	log, err := logging.New(logging.Options{Format: "text", Level: "debug", Writer: &buf})
	if err != nil {
		t.Fatal(err)
	}
	ctx, sc := spanCtx(t)
	log.WithGroup("g").With("k", "v").DebugContext(ctx, "hello")
	out := buf.String()
	if !strings.Contains(out, "msg=hello") || !strings.Contains(out, sc.TraceID().String()) || !strings.Contains(out, "g.k=v") {
		t.Fatalf("text record %q lacks the message, the group's attributes or the trace id", out)
	}
}

func TestFlagsAndBadOptions(t *testing.T) {
	var o logging.Options
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	o.RegisterFlags(fs)
	if o.Level != "info" || o.Format != "json" {
		t.Fatalf("defaults %+v, want info and json", o)
	}
	if err := fs.Parse([]string{"--log-level=warn", "--log-format=text"}); err != nil {
		t.Fatal(err)
	}
	if o.Level != "warn" || o.Format != "text" {
		t.Fatalf("after flags %+v", o)
	}
	for _, bad := range []logging.Options{{Level: "loud"}, {Format: "xml"}} {
		if _, err := logging.New(bad); err == nil {
			t.Errorf("New(%+v) accepted a bad option", bad)
		}
	}
}
