// Package app holds the hook runner's use case: run one hook and report its
// result exactly as lifecycle needs it.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nodesmith/nodesmith/libs/backoff"
	"github.com/nodesmith/nodesmith/libs/logging"
	"github.com/nodesmith/nodesmith/libs/sealed"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/ports"
)

// ErrInterrupted is returned by Handle when the runner stopped a hook before
// it finished (shutdown): the command must be delivered again.
var ErrInterrupted = errors.New("hook interrupted by runner shutdown")

// Options configure a Runner.
type Options struct {
	// RunnerID names this replica in results (pod or host name).
	RunnerID string
	// DefaultTimeout applies to hooks without their own timeout.
	DefaultTimeout time.Duration
	// MaxLogLine bounds each logged output line (default 2 KiB).
	MaxLogLine int
	// PublishTimeout bounds the attempts to publish one result (default
	// 30s). It is measured from the end of the run and survives shutdown,
	// so a finished hook's result is not lost to a SIGTERM.
	PublishTimeout time.Duration
	Logger         *slog.Logger
	// Metrics may be nil.
	Metrics *Metrics
	// Now defaults to time.Now.
	Now func() time.Time
	// OpenEnv opens the sealed values of a hook's environment (libs/sealed
	// tokens: lifecycle and the gateway seal every hook env value) just
	// before the run; the opened values go only to the executor. Nil: a
	// sealed value fails the hook (the runner has no --secrets-key-file).
	OpenEnv func(env map[string]string) (map[string]string, error)
}

// ErrNoSecretsKey: a hook's environment holds sealed values and this
// runner has no key to open them.
var ErrNoSecretsKey = errors.New("the hook's environment holds sealed values and this hook runner has no --secrets-key-file")

// Runner runs hooks with an Executor and publishes their results.
type Runner struct {
	exec ports.Executor
	pub  ports.ResultPublisher
	o    Options

	mu       sync.Mutex
	inFlight map[string]*run // by hook run id
}

// run is a hook run in progress; duplicates of it wait for done.
type run struct {
	done chan struct{}
	err  error
}

// NewRunner returns a Runner.
func NewRunner(exec ports.Executor, pub ports.ResultPublisher, o Options) *Runner {
	if o.DefaultTimeout <= 0 {
		o.DefaultTimeout = 15 * time.Minute
	}
	if o.MaxLogLine <= 0 {
		o.MaxLogLine = 2 << 10
	}
	if o.PublishTimeout <= 0 {
		o.PublishTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Runner{exec: exec, pub: pub, o: o, inFlight: map[string]*run{}}
}

// Handle runs h and publishes its result. A failed script is a published
// result, not an error. Handle returns an error only when the command
// should be delivered again: the runner was stopped mid-run (ctx cancelled;
// nothing is published, because the hook's outcome is unknown and another
// replica will run it) or the result could not be published.
//
// A delivery of a hook run that this runner is already running (a
// redelivery that raced a heartbeat) does not start a second, concurrent
// run on the VM: it waits for the first and shares its outcome.
func (r *Runner) Handle(ctx context.Context, h domain.Hook) error {
	log := logging.WithTrace(ctx, r.o.Logger).With(
		"instance", h.InstanceID, "group", h.Group, "hook", h.Kind.String(),
		"hook_name", h.Name, "attempt", h.Attempt, "host", h.Host)

	key := h.RunID()
	r.mu.Lock()
	if running, ok := r.inFlight[key]; ok {
		r.mu.Unlock()
		log.Warn("hook delivered again while it runs here; waiting for the run in progress")
		select {
		case <-running.done:
			return running.err
		case <-ctx.Done():
			return fmt.Errorf("instance %s %s attempt %d: %w", h.InstanceID, h.Kind, h.Attempt, ErrInterrupted)
		}
	}
	current := &run{done: make(chan struct{})}
	r.inFlight[key] = current
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.inFlight, key)
		r.mu.Unlock()
		close(current.done)
	}()
	current.err = r.handle(ctx, h, log)
	return current.err
}

func (r *Runner) handle(ctx context.Context, h domain.Hook, log *slog.Logger) error {
	var res domain.Result
	switch {
	case h.Blank():
		log.Info("hook has no script, skipping")
		res = domain.SkippedResult(h, r.o.RunnerID, r.o.Now())
	default:
		var err error
		res, err = r.execute(ctx, h, log)
		if err != nil {
			return err
		}
	}
	r.o.Metrics.observeResult(res)

	attrs := []any{"succeeded", res.Succeeded, "exit_code", res.ExitCode, "duration", res.FinishedAt.Sub(res.StartedAt)}
	if !res.Succeeded {
		attrs = append(attrs, "failure", res.Failure.String(), "retryable", res.Retryable, "err", res.Error)
		log.Warn("hook failed", attrs...)
	} else {
		log.Info("hook finished", attrs...)
	}

	// The run is over; publishing must not be cut short by a shutdown that
	// began meanwhile, or a finished hook would run again elsewhere.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.PublishTimeout)
	defer cancel()
	if err := r.publish(pctx, res, log); err != nil {
		return err
	}
	return nil
}

func (r *Runner) execute(ctx context.Context, h domain.Hook, log *slog.Logger) (domain.Result, error) {
	started := r.o.Now()
	// Checked here as well as in the executor so that an empty host never
	// reaches anything that could open a connection. An invalid hook is a
	// result for lifecycle, not an error of the runner.
	if ex, invalid := invalidHook(h); invalid {
		return domain.NewResult(h, ex, "", r.o.RunnerID, started, r.o.Now()), nil
	}
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = r.o.DefaultTimeout
	}
	log.Info("running hook", "timeout", timeout)

	// Sealed env values are opened here, just before the run; the opened
	// values go only to the executor and to the redactors below.
	cmd := h.Command()
	env, err := r.openEnv(cmd.Env)
	if err != nil {
		// The error names variables, never values.
		ex := domain.Execution{ExitCode: domain.NoExitCode, Failure: domain.FailureInvalid, Err: err}
		return domain.NewResult(h, ex, "", r.o.RunnerID, started, r.o.Now()), nil //nolint:nilerr // the hook's failure, reported in its result
	}
	cmd.Env = env
	opened := h
	opened.Env = env
	opened.RedactedEnv = withSealedNames(h.RedactedEnv, h.Env)

	// The operator's env values are redacted before the output reaches the
	// logs or the tail that leaves in the result: a "set -x" script that
	// runs "kubeadm join --token $JOIN_TOKEN" must not publish the token.
	tail := domain.NewTail(domain.OutputTailSize)
	stdout := r.lineLogger(log, "stdout")
	stderr := r.lineLogger(log, "stderr")
	secrets := opened.Secrets()
	outR := domain.NewRedactor(io.MultiWriter(tail, stdout), secrets)
	errR := domain.NewRedactor(io.MultiWriter(tail, stderr), secrets)
	hctx, cancel := context.WithTimeout(ctx, timeout)
	ex := r.exec.Run(hctx, cmd, outR, errR)
	cancel()
	_ = outR.Flush() // the tail and line writers never fail
	_ = errR.Flush()
	stdout.Flush()
	stderr.Flush()
	r.o.Metrics.observeConnect(ex)

	// A run cut short because this replica is stopping says nothing about
	// the hook: hand it to another replica instead of reporting a failure.
	if ex.Failure == domain.FailureCanceled || (ex.Failure != domain.FailureNone && ctx.Err() != nil) {
		r.o.Metrics.observeInterrupted(h.Kind)
		log.Warn("hook interrupted by shutdown; it will be delivered again", "err", ex.Err)
		return domain.Result{}, fmt.Errorf("instance %s %s attempt %d: %w", h.InstanceID, h.Kind, h.Attempt, ErrInterrupted)
	}
	res := domain.NewResult(h, ex, tail.String(), r.o.RunnerID, started, r.o.Now())
	log.Debug("hook run ended", "output_bytes", tail.Total(), "connect_attempts", ex.ConnectAttempts, "failure", ex.Failure.String())
	return res, nil
}

// withSealedNames adds to the names lifecycle listed for redaction every
// variable that arrived sealed: a sealed value is a secret whoever forgot
// to list it (a lifecycle of an older release during a rolling upgrade).
func withSealedNames(names []string, env map[string]string) []string {
	out := slices.Clone(names)
	for name, v := range env {
		if sealed.IsToken(v) && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

func (r *Runner) openEnv(env map[string]string) (map[string]string, error) {
	sealedEnv := false
	for _, v := range env {
		if sealed.IsToken(v) {
			sealedEnv = true
			break
		}
	}
	if !sealedEnv {
		return env, nil
	}
	if r.o.OpenEnv == nil {
		return nil, ErrNoSecretsKey
	}
	opened, err := r.o.OpenEnv(env)
	if err != nil {
		return nil, err
	}
	// The opened values are checked as the sealed ones were (names only in
	// the error).
	return opened, domain.ValidateEnv(opened)
}

// invalidHook describes the execution of a hook that fails validation.
func invalidHook(h domain.Hook) (domain.Execution, bool) {
	err := h.Validate()
	if err == nil {
		return domain.Execution{}, false
	}
	return domain.Execution{ExitCode: domain.NoExitCode, Failure: domain.FailureInvalid, Err: err}, true
}

func (r *Runner) lineLogger(log *slog.Logger, stream string) *domain.LineWriter {
	return &domain.LineWriter{
		Max: r.o.MaxLogLine,
		// Debug: a hook's output is for troubleshooting one hook (its tail
		// is in the result, and in the failure log); at Info, thousands of
		// hooks a day drown the service's own logs.
		Emit: func(line string, dropped int) {
			if dropped > 0 {
				log.Debug("hook output", "stream", stream, "line", line, "truncated_bytes", dropped)
				return
			}
			log.Debug("hook output", "stream", stream, "line", line)
		},
	}
}

// publish retries with jittered exponential backoff until ctx ends: a
// result lost here would make the hook run again.
func (r *Runner) publish(ctx context.Context, res domain.Result, log *slog.Logger) error {
	b := backoff.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second}.New()
	for attempt := 1; ; attempt++ {
		err := r.pub.Publish(ctx, res)
		if err == nil {
			return nil
		}
		r.o.Metrics.observePublishFailure()
		wait := b.Next()
		if ctx.Err() != nil || time.Now().Add(wait).After(deadlineOf(ctx)) {
			return fmt.Errorf("publishing result of instance %s %s attempt %d (%d tries): %w",
				res.InstanceID, res.Kind, res.Attempt, attempt, err)
		}
		log.Warn("publishing hook result failed, retrying", "err", err, "in", wait)
		_ = backoff.Wait(ctx, wait) // an ended ctx is reported by the next round
	}
}

func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(time.Hour)
}
