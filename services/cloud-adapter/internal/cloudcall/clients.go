package cloudcall

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// ClientOptions configure an adapter's SDK clients.
type ClientOptions struct {
	// Credentials supplies each account's key, looked up on every request
	// so rotated secrets apply without new clients.
	Credentials ports.Credentials
	// Endpoint overrides the API host ("host:port"), e.g. for an emulator;
	// empty means the cloud's public endpoint of the region.
	Endpoint string
	// Scheme is "https" (default) or "http".
	Scheme string
	// Timeout bounds one HTTP request; 0 means 30s.
	Timeout time.Duration
	// Transport is shared by every client; nil means a clone of
	// http.DefaultTransport.
	Transport http.RoundTripper
}

// WithDefaults fills the zero Transport, Timeout and Scheme.
func (o ClientOptions) WithDefaults() ClientOptions {
	if o.Transport == nil {
		o.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Scheme == "" {
		o.Scheme = "https"
	}
	return o
}

// ClientCache builds an adapter's SDK client of an (account, region) on
// first use and keeps it. It is safe for concurrent use.
type ClientCache[T any] struct {
	creds ports.Credentials
	mu    sync.Mutex
	m     map[[2]string]T
}

// NewClientCache returns an empty cache for accounts of creds.
func NewClientCache[T any](creds ports.Credentials) *ClientCache[T] {
	return &ClientCache[T]{creds: creds, m: map[[2]string]T{}}
}

// Get returns the client of account and region, building it with build
// the first time. An account without credentials is an auth error and a
// target without region an invalid-parameters one, before any client is
// built.
func (c *ClientCache[T]) Get(account, region string, build func() (T, error)) (T, error) {
	var zero T
	if _, err := c.creds.Lookup(account); err != nil {
		return zero, ports.NewAuthError("NoCredentials", fmt.Sprintf("no credentials configured for account %q", account))
	}
	if region == "" {
		return zero, ports.NewInvalidParametersError("MissingRegion", "the command's target has no region")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := [2]string{account, region}
	if cl, ok := c.m[k]; ok {
		return cl, nil
	}
	cl, err := build()
	if err != nil {
		return zero, ports.NewInvalidParametersError("ClientError", fmt.Sprintf("creating the client of %s/%s: %v", account, region, err))
	}
	c.m[k] = cl
	return cl, nil
}

// Value is Call for an action with an answer: fn's result of the
// successful attempt.
func Value[A, T any](ctx context.Context, c *Caller, t ports.Target, action string, get func(account, region string) (A, error), fn func(ctx context.Context, api A) (T, error)) (T, error) {
	var out T
	err := Call(ctx, c, t, action, get, func(ctx context.Context, api A) error {
		v, err := fn(ctx, api)
		if err == nil {
			out = v
		}
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}
