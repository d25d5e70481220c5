package cloudcall

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ratelimit"
)

// AdapterOptions configure an adapter whose SDK surface is API: its SDK
// clients, and pacing, retries and timeouts (nil Limits means the cloud's
// defaults). Adapters' Options are this type.
type AdapterOptions[API any] struct {
	// Clients returns the SDK client of an account and region. Its errors
	// are *ports.CloudError (auth when the account has no credentials).
	Clients func(account, region string) (API, error)
	Settings
}

// Profile is what an adapter tells Adapter about its cloud.
type Profile struct {
	// Provider, RPCSystem, Service and Classify are as in Options.
	Provider  string
	RPCSystem string
	Service   string
	Classify  func(err error) (*ports.CloudError, bool)
	// DefaultLimits replace nil Settings.Limits.
	DefaultLimits ratelimit.Limits
}

// Adapter is the cloud-neutral half of a ports.Cloud adapter: it runs the
// adapter's calls with its SDK clients through a Caller, and holds what
// create, describe and terminate do whatever the cloud (request checks,
// a fresh request per attempt, retrying a terminate refused for a VM
// already gone, errors naming the action). The adapter keeps only its
// cloud's own: request and answer shapes, error codes, paging. It is safe
// for concurrent use.
type Adapter[API any] struct {
	caller  *Caller
	clients func(account, region string) (API, error)
}

// NewAdapter returns the Adapter of a cloud described by p.
func NewAdapter[API any](p Profile, o AdapterOptions[API]) *Adapter[API] {
	if o.Limits == nil {
		o.Limits = p.DefaultLimits
	}
	return &Adapter[API]{
		caller: New(Options{
			Provider: p.Provider, RPCSystem: p.RPCSystem, Service: p.Service, Classify: p.Classify, Settings: o.Settings,
		}),
		clients: o.Clients,
	}
}

// Logger is the adapter's logger (with the provider attribute).
func (a *Adapter[API]) Logger() *slog.Logger { return a.caller.Logger() }

// Call runs one API action of target t (see the function Call).
func (a *Adapter[API]) Call(ctx context.Context, t ports.Target, action string, fn func(ctx context.Context, api API) error) error {
	return Call(ctx, a.caller, t, action, a.clients, fn)
}

// Create is ports.Cloud's CreateBatch with one create call: it refuses a
// request no cloud should see (CheckCreate), builds the cloud's request
// with build once up front so a broken template fails without a call, then
// runs action with run and a fresh request each attempt (SDKs keep
// per-call state in a request).
func Create[API, R any](ctx context.Context, a *Adapter[API], req ports.CreateRequest, action string,
	build func(ports.CreateRequest) (R, error), run func(ctx context.Context, api API, r R) ([]string, error),
) ([]string, error) {
	if err := CheckCreate(req); err != nil {
		return nil, err
	}
	if _, err := build(req); err != nil {
		return nil, err
	}
	ids, err := Value(ctx, a.caller, req.Target, action, a.clients, func(ctx context.Context, api API) ([]string, error) {
		r, err := build(req)
		if err != nil {
			return nil, err
		}
		return run(ctx, api, r)
	})
	if err != nil {
		return nil, fmt.Errorf("%s (template %q, token %s): %w", action, req.Template, req.ClientToken, err)
	}
	return ids, nil
}

// Describe is ports.Cloud's Describe with one describe call (fn) of ids:
// no ids is no call, more than one call takes is refused.
func (a *Adapter[API]) Describe(ctx context.Context, t ports.Target, ids []string, action string,
	fn func(ctx context.Context, api API) ([]domain.Status, error),
) ([]domain.Status, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if err := CheckIDs(ids); err != nil {
		return nil, err
	}
	out, err := Value(ctx, a.caller, t, action, a.clients, fn)
	if err != nil {
		return nil, fmt.Errorf("%s (%d ids): %w", action, len(ids), err)
	}
	return out, nil
}

// Terminate is ports.Cloud's Terminate for a cloud whose terminate call
// (fn, action) refuses the whole set when any VM is already gone or
// terminating (gone says an error is such a refusal): on such an answer it
// describes the VMs (describe is the adapter's Describe) and terminates only
// those still there and not terminating, for at most three rounds.
func (a *Adapter[API]) Terminate(ctx context.Context, t ports.Target, ids []string, action string,
	gone func(error) bool,
	describe func(ctx context.Context, t ports.Target, ids []string) ([]domain.Status, error),
	fn func(ctx context.Context, api API, ids []string) error,
) error {
	return terminator{
		Terminate: func(ctx context.Context, ids []string) error {
			err := a.Call(ctx, t, action, func(ctx context.Context, api API) error { return fn(ctx, api, ids) })
			if err != nil {
				return fmt.Errorf("%s (%d ids): %w", action, len(ids), err)
			}
			return nil
		},
		Gone:     gone,
		Describe: func(ctx context.Context, ids []string) ([]domain.Status, error) { return describe(ctx, t, ids) },
	}.terminateAll(ctx, ids)
}

// CodeSet is a set of a cloud's error codes.
type CodeSet map[string]bool

// Has says err is a *ports.CloudError with one of the codes.
func (s CodeSet) Has(err error) bool {
	ce, ok := ports.AsCloudError(err)
	return ok && s[ce.Code]
}

// MaxPages bounds a listing (100,000 VMs at 100 a page) so a misbehaving
// API cannot keep it paging forever.
const MaxPages = 1000

// ListPages reads the pages of a listing of cluster clusterID's VMs:
// page(n) reads page n (from 0) and says whether it was the last. The
// first error stops it, wrapped with the cluster and the page; a listing
// not done after MaxPages pages is a transient TooManyPages error.
func ListPages(clusterID string, page func(n int) (last bool, err error)) error {
	for n := range MaxPages {
		last, err := page(n)
		if err != nil {
			return fmt.Errorf("listing instances of cluster %s (page %d): %w", clusterID, n, err)
		}
		if last {
			return nil
		}
	}
	return ports.NewTransientError("TooManyPages", fmt.Sprintf("listing instances of cluster %s did not end after %d pages", clusterID, MaxPages))
}
