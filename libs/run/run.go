// Package run runs a service's long-lived parts together: when one fails or
// the context ends, the others are told to stop, and Wait returns the first
// error. It also serves HTTP with a graceful shutdown.
package run

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"
)

// Group runs functions until the first error or until ctx is done.
type Group struct {
	g   *errgroup.Group
	ctx context.Context
}

// NewGroup returns a Group and the context its functions should watch.
func NewGroup(ctx context.Context) (*Group, context.Context) {
	g, gctx := errgroup.WithContext(ctx)
	return &Group{g: g, ctx: gctx}, gctx
}

// Go starts f; name prefixes its error.
func (g *Group) Go(name string, f func(ctx context.Context) error) {
	g.g.Go(func() error {
		if err := f(g.ctx); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	})
}

// Wait waits for all functions and returns the first error.
func (g *Group) Wait() error { return g.g.Wait() }

// HTTP returns a function that serves srv on l until ctx ends, then shuts it
// down gracefully within grace.
func HTTP(srv *http.Server, l net.Listener, grace time.Duration) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(l) }()
		select {
		case err := <-errc:
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return err
		case <-ctx.Done():
		}
		// ctx is done: shutdown gets its own deadline, keeping ctx's values.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
		return nil
	}
}

// Listen opens a TCP listener with a clear error.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	return l, nil
}

// Every calls f every interval until ctx ends, then returns nil. The first
// call is one interval after the start; a call that outlasts the interval
// delays the next (ticks are not queued up).
func Every(ctx context.Context, interval time.Duration, f func(ctx context.Context)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			f(ctx)
		}
	}
}
