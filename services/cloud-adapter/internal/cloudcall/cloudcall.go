// Package cloudcall is what every cloud adapter does around one API call,
// whatever the cloud: pace it with the client-side rate limiter per
// (account, region, action), bound it with a timeout, map the SDK's error to
// a *ports.CloudError, retry throttled and transient answers with jittered
// exponential backoff up to a bound, and record metrics and one client span.
// An adapter supplies only what is its cloud's own: how to get its SDK
// client, how to read its SDK's errors, and its table of error codes
// (Codes).
package cloudcall

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/nodesmith/nodesmith/libs/backoff"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/metrics"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ratelimit"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/telemetry"
)

// Settings are what every adapter is configured with besides its SDK
// clients; adapters' Options embed them.
type Settings struct {
	// Limits pace calls per (account, region, action); adapters replace
	// nil with their cloud's defaults.
	Limits ratelimit.Limits
	// Retry bounds the retries of throttled and transient answers.
	Retry backoff.Policy
	// CallTimeout bounds one API call.
	CallTimeout time.Duration
	Metrics     *metrics.Cloud
	Logger      *slog.Logger
}

// Options configure a Caller.
type Options struct {
	// Provider is the provider name (metrics, logs, span attributes).
	Provider string
	// RPCSystem and Service name the API on spans ("tencentcloud"/"cvm").
	RPCSystem string
	Service   string
	// Classify reads the cloud's own answer out of an SDK error; false
	// when err is not one (then it is a client-side failure).
	Classify func(err error) (*ports.CloudError, bool)
	Settings
}

// Caller runs API calls for one provider. It is safe for concurrent use.
type Caller struct {
	o      Options
	limits *ratelimit.Limiters
	log    *slog.Logger
}

// DefaultRetry absorbs a few seconds of throttling: 6 calls over about 8s,
// with equal jitter.
func DefaultRetry() backoff.Policy {
	return backoff.Policy{Initial: 250 * time.Millisecond, Max: 4 * time.Second, Attempts: 6}
}

// New returns a Caller. Zero Retry and CallTimeout get the defaults.
func New(o Options) *Caller {
	if o.Retry.Attempts == 0 {
		o.Retry = DefaultRetry()
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	for action, l := range o.Limits {
		o.Metrics.RateLimit(o.Provider, action, l.Rate, l.Burst)
	}
	return &Caller{o: o, limits: ratelimit.New(o.Limits), log: o.Logger.With("provider", o.Provider)}
}

// Logger is the caller's logger (with the provider attribute).
func (c *Caller) Logger() *slog.Logger { return c.log }

// Call runs one API action: get returns the SDK client of the target
// (its error must already be a *ports.CloudError), fn makes the call with
// it. Call rate-limits, times out, maps errors and retries; it is one
// client span (a child of the command's span) whatever the number of
// attempts: the attempts, the time spent waiting for the rate limiter and
// each retried failure are recorded on it.
func Call[A any](ctx context.Context, c *Caller, t ports.Target, action string, get func(account, region string) (A, error), fn func(ctx context.Context, api A) error) error {
	ctx, span := telemetry.Tracer().Start(ctx, c.o.Service+" "+action, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("rpc.system", c.o.RPCSystem),
		attribute.String("rpc.service", c.o.Service),
		attribute.String("rpc.method", action),
		attribute.String("cloud.provider", c.o.Provider),
		attribute.String("cloud.account.id", t.Account),
		attribute.String("cloud.region", t.Region)))
	defer span.End()
	attempt := 0
	var waitedTotal time.Duration
	api, err := get(t.Account, t.Region)
	if err == nil {
		err = backoff.Retry(ctx, c.o.Retry, ports.IsRetryable, func(ctx context.Context) error {
			attempt++
			waited, err := c.limits.Wait(ctx, t.Account, t.Region, action)
			waitedTotal += waited
			c.o.Metrics.RateLimitWait(c.o.Provider, action, waited)
			if waited >= time.Millisecond {
				span.AddEvent("rate limiter wait", trace.WithAttributes(
					attribute.Int("nodesmith.call_attempt", attempt),
					attribute.Float64("nodesmith.rate_limit.wait_seconds", waited.Seconds())))
			}
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				// The caller's deadline is too close for the next token.
				return ports.NewThrottledError("ClientRateLimit", err.Error())
			}
			cctx, cancel := context.WithTimeout(ctx, c.o.CallTimeout)
			start := time.Now()
			err = c.MapError(ctx, fn(cctx, api))
			cancel()
			c.o.Metrics.APICall(c.o.Provider, action, Result(err), time.Since(start))
			if ports.IsRetryable(err) {
				span.AddEvent("retryable failure", trace.WithAttributes(
					attribute.Int("nodesmith.call_attempt", attempt),
					attribute.String("nodesmith.result", Result(err)),
					attribute.String("nodesmith.cloud_error_code", ErrorCode(err))))
				c.log.Debug("cloud call failed, retrying", "action", action, "account", t.Account, "region", t.Region, "attempt", attempt, "err", err)
			}
			return err
		})
	}
	span.SetAttributes(
		attribute.String("nodesmith.result", Result(err)),
		attribute.Int("nodesmith.call_attempts", attempt),
		attribute.Float64("nodesmith.rate_limit.wait_seconds", waitedTotal.Seconds()))
	if err != nil {
		if code := ErrorCode(err); code != "" {
			span.SetAttributes(attribute.String("nodesmith.cloud_error_code", code))
		}
		span.RecordError(err)
		span.SetStatus(codes.Error, Result(err))
	}
	return err
}

// MapError turns an SDK error into a *ports.CloudError. When parent (the
// caller's context) has ended, its error is returned instead: that is not
// the cloud's answer.
func (c *Caller) MapError(parent context.Context, err error) error {
	if err == nil {
		return nil
	}
	if parent.Err() != nil {
		return parent.Err()
	}
	if _, ok := ports.AsCloudError(err); ok {
		return err // already classified (by the adapter itself)
	}
	if c.o.Classify != nil {
		if ce, ok := c.o.Classify(err); ok {
			return ce
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ports.NewTransientError("Timeout", err.Error())
	}
	// Anything else comes from the client side of the call (transport,
	// encoding); repeating it is the sensible bounded response.
	return ports.NewTransientError("ClientError", err.Error())
}

// ErrorCode is the cloud's error code of err, if it has one.
func ErrorCode(err error) string {
	if ce, ok := ports.AsCloudError(err); ok {
		return ce.Code
	}
	return ""
}

// Result is err's label for metrics and spans.
func Result(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	default:
		return ports.KindOf(err).String()
	}
}

// Prefix maps a family of error codes to a kind.
type Prefix struct {
	Prefix string
	Kind   ports.ErrorKind
}

// Codes is one cloud's table of error codes: an exact entry wins over a
// prefix, prefixes are checked in order, and a code no rule knows is
// ErrorKindUnknown (reported, not retried).
type Codes struct {
	Exact    map[string]ports.ErrorKind
	Prefixes []Prefix
}

// Kind classifies code.
func (c Codes) Kind(code string) ports.ErrorKind {
	if k, ok := c.Exact[code]; ok {
		return k
	}
	for _, p := range c.Prefixes {
		if strings.HasPrefix(code, p.Prefix) {
			return p.Kind
		}
	}
	return ports.ErrorKindUnknown
}
