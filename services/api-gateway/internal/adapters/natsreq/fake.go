package natsreq

import (
	"context"
	"slices"
	"sync"

	"github.com/nodesmith/nodesmith/libs/contract"
	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/ports"
)

// Fake is an in-process ports.Lifecycle for unit tests: it records calls,
// returns programmed errors first, then asks Handle or HandleWire (or
// succeeds with zero revisions).
type Fake struct {
	// Handle, when set, answers requests that no programmed error took.
	Handle func(ctx context.Context, req ports.Request) (ports.Revisions, error)
	// HandleWire, when set and Handle is not, answers with the request in
	// its wire shape (the conversion Client sends), for tests that check
	// what goes on the wire.
	HandleWire func(ctx context.Context, req *lifecyclev1.Request) (ports.Revisions, error)

	mu       sync.Mutex
	calls    []ports.Request
	nextErrs []error
}

var _ ports.Lifecycle = (*Fake)(nil)

// Do implements ports.Lifecycle.
func (f *Fake) Do(ctx context.Context, req ports.Request) (ports.Revisions, error) {
	f.mu.Lock()
	f.calls = append(f.calls, req)
	var err error
	if len(f.nextErrs) > 0 {
		err, f.nextErrs = f.nextErrs[0], f.nextErrs[1:]
	}
	handle, wire := f.Handle, f.HandleWire
	f.mu.Unlock()
	if err != nil {
		return ports.Revisions{}, err
	}
	switch {
	case handle != nil:
		return handle(ctx, req)
	case wire != nil:
		w, err := Request(req)
		if err != nil {
			return ports.Revisions{}, domain.Errorf(contract.CodeInvalidArgument, "lifecycle request: %v", err)
		}
		return wire(ctx, w)
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
func (f *Fake) Calls() []ports.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// WireCalls returns the requests received in their wire shape (nil for
// one the wire cannot carry).
func (f *Fake) WireCalls() []*lifecyclev1.Request {
	calls := f.Calls()
	out := make([]*lifecyclev1.Request, len(calls))
	for i, c := range calls {
		out[i], _ = Request(c)
	}
	return out
}

// Reset forgets calls and programmed errors.
func (f *Fake) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls, f.nextErrs = nil, nil
}
