// Package fake provides in-memory implementations of the hook runner's
// ports for unit tests: programmable outcomes, recorded calls.
package fake

import (
	"context"
	"io"
	"sync"

	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/ports"
)

var (
	_ ports.Executor        = (*Executor)(nil)
	_ ports.ResultPublisher = (*Publisher)(nil)
)

// Executor records commands and answers with a programmable function.
type Executor struct {
	// RunFunc decides the outcome; nil means success with exit code 0.
	// It may write output and may block on ctx.
	RunFunc func(ctx context.Context, cmd domain.Command, stdout, stderr io.Writer) domain.Execution

	mu    sync.Mutex
	calls []domain.Command
}

// Run records cmd and calls RunFunc.
func (e *Executor) Run(ctx context.Context, cmd domain.Command, stdout, stderr io.Writer) domain.Execution {
	e.mu.Lock()
	e.calls = append(e.calls, cmd)
	f := e.RunFunc
	e.mu.Unlock()
	if f == nil {
		return domain.Execution{ExitCode: 0, ConnectAttempts: 1, Connected: true}
	}
	return f(ctx, cmd, stdout, stderr)
}

// Calls returns the commands run so far.
func (e *Executor) Calls() []domain.Command {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]domain.Command(nil), e.calls...)
}

// Publisher records published results. The next len(FailNext) calls fail
// with those errors, in order.
//
// Results is the log of accepted publications, a re-run's included;
// Stored is what the event stream keeps, as ports.ResultPublisher
// promises (and adapters/resulttest checks against JetStream): one result
// per (instance, kind, attempt), the first.
type Publisher struct {
	mu       sync.Mutex
	results  []domain.Result
	stored   []domain.Result
	seen     map[string]bool
	failNext []error
	calls    int
}

// FailNext makes the next publishes fail with errs, in order.
func (p *Publisher) FailNext(errs ...error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failNext = append(p.failNext, errs...)
}

// Publish records r unless a programmed failure is due.
func (p *Publisher) Publish(ctx context.Context, r domain.Result) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if len(p.failNext) > 0 {
		err := p.failNext[0]
		p.failNext = p.failNext[1:]
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	p.results = append(p.results, r)
	id := domain.Hook{InstanceID: r.InstanceID, Kind: r.Kind, Attempt: r.Attempt}.RunID()
	if !p.seen[id] {
		if p.seen == nil {
			p.seen = map[string]bool{}
		}
		p.seen[id] = true
		p.stored = append(p.stored, r)
	}
	return nil
}

// Stored returns the results the modelled stream keeps, oldest first.
func (p *Publisher) Stored() []domain.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]domain.Result(nil), p.stored...)
}

// Results returns what was published.
func (p *Publisher) Results() []domain.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]domain.Result(nil), p.results...)
}

// Calls counts Publish calls, failed ones included.
func (p *Publisher) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}
