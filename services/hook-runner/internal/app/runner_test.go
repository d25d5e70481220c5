package app_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/metrics/metricstest"
	"github.com/nodesmith/nodesmith/libs/testwait"

	"github.com/nodesmith/nodesmith/libs/logging/logtest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/services/hook-runner/internal/adapters/fake"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/app"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
)

type harness struct {
	exec    *fake.Executor
	pub     *fake.Publisher
	runner  *app.Runner
	metrics *app.Metrics
	reg     *prometheus.Registry
	logs    *logtest.Buffer
}

func newHarness(t *testing.T, mutate func(*app.Options)) *harness {
	t.Helper()
	h := &harness{exec: &fake.Executor{}, pub: &fake.Publisher{}, reg: prometheus.NewRegistry(), logs: &logtest.Buffer{}}
	h.metrics = app.NewMetrics(h.reg)
	o := app.Options{
		RunnerID:       "runner-1",
		DefaultTimeout: time.Minute,
		MaxLogLine:     64,
		PublishTimeout: 5 * time.Second,
		Logger:         slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics:        h.metrics,
	}
	if mutate != nil {
		mutate(&o)
	}
	h.runner = app.NewRunner(h.exec, h.pub, o)
	return h
}

func hook() domain.Hook {
	return domain.Hook{
		InstanceID: "ins-1", Attempt: 2, Kind: domain.KindAfterCreated, Name: "join", Group: "g1",
		Host: "10.0.0.1", Script: "echo hi", Env: map[string]string{"NODE_NAME": "n1"},
	}
}

func onlyResult(t *testing.T, p *fake.Publisher) domain.Result {
	t.Helper()
	rs := p.Results()
	if len(rs) != 1 {
		t.Fatalf("published %d results, want 1: %+v", len(rs), rs)
	}
	return rs[0]
}

func TestHandleSuccessPublishesResultAndLogsOutput(t *testing.T) {
	h := newHarness(t, nil)
	h.exec.RunFunc = func(_ context.Context, _ domain.Command, stdout, stderr io.Writer) domain.Execution {
		_, _ = io.WriteString(stdout, "joining\n")
		_, _ = io.WriteString(stderr, "warning: "+strings.Repeat("x", 100)+"\n")
		return domain.Execution{ExitCode: 0, ConnectAttempts: 3, Connected: true, HostKey: "ssh-ed25519 AAAA"}
	}
	if err := h.runner.Handle(context.Background(), hook()); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	r := onlyResult(t, h.pub)
	if !r.Succeeded || r.Retryable || r.ExitCode != 0 || r.Runner != "runner-1" || r.InstanceID != "ins-1" ||
		r.Attempt != 2 || r.Kind != domain.KindAfterCreated || r.HostKey != "ssh-ed25519 AAAA" {
		t.Fatalf("result = %+v", r)
	}
	if !strings.Contains(r.OutputTail, "joining\n") || !strings.Contains(r.OutputTail, "warning: ") {
		t.Fatalf("output tail = %q", r.OutputTail)
	}
	if r.StartedAt.IsZero() || r.FinishedAt.Before(r.StartedAt) {
		t.Fatalf("timestamps: %v .. %v", r.StartedAt, r.FinishedAt)
	}
	logs := h.logs.String()
	for _, want := range []string{`line=joining`, `stream=stdout`, `instance=ins-1`, `group=g1`, `hook=after_created`, `truncated_bytes=45`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	if got := metricstest.Value(t, h.reg, "nodesmith_hook_ssh_connection_attempts_total", nil); got != 3 {
		t.Errorf("connection attempts = %v, want 3", got)
	}
	if got := metricstest.Value(t, h.reg, "nodesmith_hook_ssh_connection_failures_total", map[string]string{"reason": "connection"}); got != 2 {
		t.Errorf("connection failures = %v, want 2", got)
	}
	if got := metricstest.Value(t, h.reg, "nodesmith_hook_runs_total", map[string]string{"hook": "after_created", "result": "succeeded"}); got != 1 {
		t.Errorf("runs{succeeded} = %v, want 1", got)
	}
}

func TestHandleNeverRunsInvalidHooks(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*domain.Hook)
		want   string
	}{
		{"empty host", func(h *domain.Hook) { h.Host = "" }, "no host"},
		{"bad env name", func(h *domain.Hook) { h.Env = map[string]string{"X;Y": "1"} }, "environment variable name"},
		{"bad port", func(h *domain.Hook) { h.Port = -1 }, "invalid port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			hk := hook()
			tt.mutate(&hk)
			if err := h.runner.Handle(context.Background(), hk); err != nil {
				t.Fatalf("Handle: %v", err)
			}
			if calls := h.exec.Calls(); len(calls) != 0 {
				t.Fatalf("executor called for an invalid hook: %+v", calls)
			}
			r := onlyResult(t, h.pub)
			if r.Succeeded || r.Retryable || r.ExitCode != -1 || r.Failure != domain.FailureInvalid || !strings.Contains(r.Error, tt.want) {
				t.Fatalf("result = %+v, want failed, not retryable, error containing %q", r, tt.want)
			}
		})
	}
}

func TestHandleBlankScriptIsSkipped(t *testing.T) {
	h := newHarness(t, nil)
	hk := hook()
	hk.Script = " \n\t"
	hk.Host = "" // a skipped hook needs no host either
	if err := h.runner.Handle(context.Background(), hk); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if len(h.exec.Calls()) != 0 {
		t.Fatal("executor called for a blank script")
	}
	r := onlyResult(t, h.pub)
	if !r.Succeeded || !r.Skipped {
		t.Fatalf("result = %+v, want skipped success", r)
	}
}

func TestHandleAppliesTimeouts(t *testing.T) {
	tests := []struct {
		name        string
		hookTimeout time.Duration
		want        time.Duration
	}{
		{"default", 0, time.Minute},
		{"hook override", 5 * time.Second, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			var got time.Duration
			h.exec.RunFunc = func(ctx context.Context, _ domain.Command, _, _ io.Writer) domain.Execution {
				d, ok := ctx.Deadline()
				if !ok {
					t.Error("executor context has no deadline")
				}
				got = time.Until(d)
				return domain.Execution{}
			}
			hk := hook()
			hk.Timeout = tt.hookTimeout
			if err := h.runner.Handle(context.Background(), hk); err != nil {
				t.Fatal(err)
			}
			// The deadline was set just before the call; allow for a slow machine.
			if got > tt.want || got < tt.want-10*time.Second {
				t.Fatalf("executor deadline in %v, want about %v", got, tt.want)
			}
		})
	}
}

func TestHandleFailureClasses(t *testing.T) {
	tests := []struct {
		failure   domain.Failure
		exit      int
		retryable bool
	}{
		{domain.FailureExit, 3, true},
		{domain.FailureTimeout, -1, true},
		{domain.FailureConnection, -1, true},
		{domain.FailureAuth, -1, false},
		{domain.FailureHostKey, -1, false},
		{domain.FailureInvalid, -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.failure.String(), func(t *testing.T) {
			h := newHarness(t, nil)
			h.exec.RunFunc = func(context.Context, domain.Command, io.Writer, io.Writer) domain.Execution {
				return domain.Execution{ExitCode: tt.exit, Failure: tt.failure, Err: fmt.Errorf("boom %s", tt.failure)}
			}
			if err := h.runner.Handle(context.Background(), hook()); err != nil {
				t.Fatal(err)
			}
			r := onlyResult(t, h.pub)
			if r.Succeeded || r.Retryable != tt.retryable || r.ExitCode != tt.exit || r.Error != "boom "+tt.failure.String() {
				t.Fatalf("result = %+v", r)
			}
			if got := metricstest.Value(t, h.reg, "nodesmith_hook_runs_total", map[string]string{"hook": "after_created", "result": "failed_" + tt.failure.String()}); got != 1 {
				t.Fatalf("runs metric = %v, want 1", got)
			}
		})
	}
}

func TestHandleShutdownMidRunPublishesNothing(t *testing.T) {
	h := newHarness(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	h.exec.RunFunc = func(ctx context.Context, _ domain.Command, _, _ io.Writer) domain.Execution {
		cancel() // the replica is told to stop while the script runs
		<-ctx.Done()
		return domain.Execution{ExitCode: -1, Failure: domain.FailureCanceled, Err: ctx.Err(), Connected: true, ConnectAttempts: 1}
	}
	err := h.runner.Handle(ctx, hook())
	if !errors.Is(err, app.ErrInterrupted) {
		t.Fatalf("Handle = %v, want ErrInterrupted", err)
	}
	if n := len(h.pub.Results()); n != 0 {
		t.Fatalf("published %d results for an interrupted hook", n)
	}
}

func TestHandleFinishedRunIsPublishedDespiteShutdown(t *testing.T) {
	h := newHarness(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	h.exec.RunFunc = func(context.Context, domain.Command, io.Writer, io.Writer) domain.Execution {
		cancel() // shutdown begins just as the script exits 0
		return domain.Execution{ExitCode: 0}
	}
	if err := h.runner.Handle(ctx, hook()); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if r := onlyResult(t, h.pub); !r.Succeeded {
		t.Fatalf("result = %+v", r)
	}
}

func TestHandleRetriesPublishing(t *testing.T) {
	h := newHarness(t, nil)
	h.pub.FailNext(errors.New("nats: timeout"), errors.New("nats: no responders"))
	if err := h.runner.Handle(context.Background(), hook()); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	onlyResult(t, h.pub)
	if h.pub.Calls() != 3 {
		t.Fatalf("publish calls = %d, want 3", h.pub.Calls())
	}
}

func TestHandleReportsPublishFailure(t *testing.T) {
	h := newHarness(t, func(o *app.Options) { o.PublishTimeout = 300 * time.Millisecond })
	errs := make([]error, 100)
	for i := range errs {
		errs[i] = errors.New("nats down")
	}
	h.pub.FailNext(errs...)
	err := h.runner.Handle(context.Background(), hook())
	if err == nil || !strings.Contains(err.Error(), "nats down") {
		t.Fatalf("Handle = %v, want the publish error", err)
	}
}

func TestHandleKeepsOutputTail(t *testing.T) {
	h := newHarness(t, nil)
	var all bytes.Buffer
	h.exec.RunFunc = func(_ context.Context, _ domain.Command, stdout, _ io.Writer) domain.Execution {
		for i := range 20000 {
			line := fmt.Sprintf("output line %d\n", i)
			all.WriteString(line)
			_, _ = io.WriteString(stdout, line)
		}
		return domain.Execution{ExitCode: 1, Failure: domain.FailureExit, Err: errors.New("exit 1")}
	}
	if err := h.runner.Handle(context.Background(), hook()); err != nil {
		t.Fatal(err)
	}
	r := onlyResult(t, h.pub)
	want := all.String()[all.Len()-domain.OutputTailSize:]
	if r.OutputTail != want {
		t.Fatalf("tail has %d bytes ending %q, want the last %d bytes", len(r.OutputTail), r.OutputTail[len(r.OutputTail)-20:], len(want))
	}
}

func TestHandleDuplicateDeliveryJoinsRunningHook(t *testing.T) {
	h := newHarness(t, nil)
	started := make(chan struct{})
	release := make(chan struct{})
	h.exec.RunFunc = func(context.Context, domain.Command, io.Writer, io.Writer) domain.Execution {
		close(started)
		<-release
		return domain.Execution{ExitCode: 0}
	}
	errs := make(chan error, 2)
	go func() { errs <- h.runner.Handle(context.Background(), hook()) }()
	<-started
	go func() { errs <- h.runner.Handle(context.Background(), hook()) }()
	// The duplicate must wait for the run, not finish on its own.
	waitUntil(t, func() bool { return strings.Contains(h.logs.String(), "delivered again while it runs here") })
	select {
	case err := <-errs:
		t.Fatalf("a delivery returned (%v) before the run finished", err)
	default:
	}
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("Handle: %v", err)
		}
	}
	if n := len(h.exec.Calls()); n != 1 {
		t.Fatalf("script ran %d times for two deliveries of one run", n)
	}
	onlyResult(t, h.pub)

	// Once finished, a later delivery (e.g. after a crash before the ack)
	// runs again: at-least-once.
	h.exec.RunFunc = nil
	if err := h.runner.Handle(context.Background(), hook()); err != nil {
		t.Fatal(err)
	}
	if n := len(h.exec.Calls()); n != 2 {
		t.Fatalf("script ran %d times, want 2", n)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	testwait.Until(t, 30*time.Second, "the condition", cond)
}

func TestMetricsRegisterTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	app.NewMetrics(reg)
	m := app.NewMetrics(reg) // an in-process restart on the same registry
	r := app.NewRunner(&fake.Executor{}, &fake.Publisher{}, app.Options{Metrics: m, Logger: slog.New(slog.DiscardHandler)})
	if err := r.Handle(context.Background(), hook()); err != nil {
		t.Fatal(err)
	}
	if got := metricstest.Value(t, reg, "nodesmith_hook_runs_total", map[string]string{"result": "succeeded"}); got != 1 {
		t.Fatalf("runs recorded through the second registration = %v, want 1", got)
	}
}
