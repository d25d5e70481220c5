package cloudcall

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/backoff"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ratelimit"
)

type sdkError struct{ code string }

func (e sdkError) Error() string { return e.code }

func newCaller(limits ratelimit.Limits) *Caller {
	return New(Options{
		Provider: "test", RPCSystem: "test", Service: "svc",
		Classify: func(err error) (*ports.CloudError, bool) {
			var s sdkError
			if !errors.As(err, &s) {
				return nil, false
			}
			return ports.NewCloudError(Codes{Prefixes: []Prefix{{Prefix: "Throttling", Kind: ports.ErrorKindThrottled}}}.Kind(s.code), s.code, ""), true
		},
		Settings: Settings{
			Limits: limits,
			Retry:  backoff.Policy{Initial: time.Millisecond, Max: 2 * time.Millisecond, Attempts: 3},
		},
	})
}

func TestCodesExactWinsOverPrefix(t *testing.T) {
	c := Codes{
		Exact:    map[string]ports.ErrorKind{"Invalid.NotFound": ports.ErrorKindNotFound},
		Prefixes: []Prefix{{Prefix: "Invalid", Kind: ports.ErrorKindInvalidParameters}},
	}
	for code, want := range map[string]ports.ErrorKind{
		"Invalid.NotFound": ports.ErrorKindNotFound,
		"Invalid.Other":    ports.ErrorKindInvalidParameters,
		"Invalid":          ports.ErrorKindInvalidParameters,
		"Unheard":          ports.ErrorKindUnknown,
	} {
		if got := c.Kind(code); got != want {
			t.Errorf("Kind(%s) = %s, want %s", code, got, want)
		}
	}
}

func TestMapError(t *testing.T) {
	c := newCaller(nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.MapError(ctx, sdkError{"Throttling"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v", err)
	}
	bg := context.Background()
	if err := c.MapError(bg, sdkError{"Throttling.User"}); !ports.IsThrottledError(err) {
		t.Fatalf("classified: %v", err)
	}
	own := ports.NewCapacityError("X", "")
	if err := c.MapError(bg, own); !errors.Is(err, own) {
		t.Fatalf("a CloudError is kept: %v", err)
	}
	if err := c.MapError(bg, context.DeadlineExceeded); !ports.IsTransientError(err) || ports.KindOf(err) != ports.ErrorKindTransient {
		t.Fatalf("timeout: %v", err)
	}
	if err := c.MapError(bg, errors.New("connection reset")); !ports.IsTransientError(err) {
		t.Fatalf("client-side failure: %v", err)
	}
}

func TestCallRetriesOnlyRetryableUpToTheBound(t *testing.T) {
	c := newCaller(nil)
	get := func(string, string) (int, error) { return 0, nil }
	for code, want := range map[string]int{"Throttling": 3, "Definitive": 1} {
		calls := 0
		err := Call(context.Background(), c, ports.Target{Account: "a", Region: "r"}, "Act", get, func(context.Context, int) error {
			calls++
			return sdkError{code}
		})
		if calls != want || ErrorCode(err) != code {
			t.Fatalf("%s: %d calls, err %v; want %d calls", code, calls, err, want)
		}
	}
	calls := 0
	err := Call(context.Background(), c, ports.Target{}, "Act", func(string, string) (int, error) {
		return 0, ports.NewAuthError("NoCredentials", "")
	}, func(context.Context, int) error { calls++; return nil })
	if !ports.IsAuthError(err) || calls != 0 {
		t.Fatalf("client lookup failure: %v after %d calls", err, calls)
	}
}

// TestCallReportsTheRateLimitAsThrottled: when the caller's deadline comes
// before the limiter's next token, the call is not made and the answer is a
// throttled error.
func TestCallReportsTheRateLimitAsThrottled(t *testing.T) {
	c := newCaller(ratelimit.Limits{"Act": {Rate: 0.01, Burst: 1}})
	get := func(string, string) (int, error) { return 0, nil }
	target := ports.Target{Account: "a", Region: "r"}
	if err := Call(context.Background(), c, target, "Act", get, func(context.Context, int) error { return nil }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	calls := 0
	err := Call(ctx, c, target, "Act", get, func(context.Context, int) error { calls++; return nil })
	if calls != 0 || (!ports.IsThrottledError(err) && !errors.Is(err, context.DeadlineExceeded)) {
		t.Fatalf("over the limit: %v after %d calls", err, calls)
	}
}
