package natsreq

import (
	"context"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/ports"
)

// Fake is an in-process ports.Lifecycle for unit tests: it records calls,
// returns programmed errors first, then asks Handle (or succeeds with zero
// revisions).
type Fake struct {
	// Handle, when set, answers requests that no programmed error took.
	Handle func(ctx context.Context, req *lifecyclev1.Request) (ports.Revisions, error)

	mu       sync.Mutex
	calls    []*lifecyclev1.Request
	nextErrs []error
}

var _ ports.Lifecycle = (*Fake)(nil)

// Do implements ports.Lifecycle.
func (f *Fake) Do(ctx context.Context, req *lifecyclev1.Request) (ports.Revisions, error) {
	f.mu.Lock()
	f.calls = append(f.calls, proto.Clone(req).(*lifecyclev1.Request))
	var err error
	if len(f.nextErrs) > 0 {
		err, f.nextErrs = f.nextErrs[0], f.nextErrs[1:]
	}
	handle := f.Handle
	f.mu.Unlock()
	if err != nil {
		return ports.Revisions{}, err
	}
	if handle != nil {
		return handle(ctx, req)
	}
	return ports.Revisions{}, nil
}

// FailNext makes the next calls return errs, in order.
func (f *Fake) FailNext(errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextErrs = append(f.nextErrs, errs...)
}

// Calls returns the requests received.
func (f *Fake) Calls() []*lifecyclev1.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// Reset forgets calls and programmed errors.
func (f *Fake) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls, f.nextErrs = nil, nil
}
