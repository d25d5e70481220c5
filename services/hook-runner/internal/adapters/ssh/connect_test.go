package ssh

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
)

// scriptedDial replaces an Executor's dial: the first refusals attempts are
// refused at once; the next one waits for the deadline and then returns
// what a dial cut by the deadline returns ("i/o timeout"), either before
// ctx's own timer has fired (timerFired false) or after it.
func scriptedDial(t *testing.T, refusals int, timerFired bool) func(context.Context, string, ssh.PublicKey) (*ssh.Client, *verifier, error) {
	n := 0
	return func(ctx context.Context, addr string, _ ssh.PublicKey) (*ssh.Client, *verifier, error) {
		n++
		if n <= refusals {
			return nil, &verifier{}, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		}
		dl, ok := ctx.Deadline()
		if !ok {
			t.Fatal("the connect loop ran without a deadline")
		}
		if timerFired {
			<-ctx.Done()
		} else {
			time.Sleep(time.Until(dl))
		}
		return nil, &verifier{}, &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	}
}

// TestDeadlineKeepsTheLastMeaningfulCause is the rule behind
// TestUnreachableHostFailsAtDeadline without its timing: whichever way the
// deadline ends the attempts (cutting one short, before or after ctx's
// timer fires, or during the wait between two), the error names the
// deadline and the last cause an attempt found, never the deadline's own
// "i/o timeout".
func TestDeadlineKeepsTheLastMeaningfulCause(t *testing.T) {
	for _, tc := range []struct {
		name       string
		refusals   int
		timerFired bool
		retry      time.Duration
		want       string
	}{
		{name: "attempt cut before the timer fires", refusals: 3, retry: time.Millisecond, want: "connection refused"},
		{name: "attempt cut after the timer fired", refusals: 3, timerFired: true, retry: time.Millisecond, want: "connection refused"},
		{name: "deadline during the wait", refusals: 1 << 30, retry: 50 * time.Millisecond, want: "connection refused"},
		{name: "a timeout is the only cause", refusals: 0, retry: time.Millisecond, want: "i/o timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(Options{TrustOnFirstUse: true, Password: []byte("x"), RetryInitial: tc.retry, RetryMax: tc.retry, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			e.dialFn = scriptedDial(t, tc.refusals, tc.timerFired)
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			_, _, attempts, f, err := e.connect(ctx, "192.0.2.1:22", nil)
			if f != domain.FailureConnection || !f.Retryable() {
				t.Fatalf("failure %s (%v), want a retryable connection failure", f, err)
			}
			if err == nil || !strings.Contains(err.Error(), "deadline") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q after %d attempts: want the deadline and %q", err, attempts, tc.want)
			}
			if tc.want != "i/o timeout" && strings.Contains(err.Error(), "i/o timeout") {
				t.Fatalf("error %q: the deadline's own timeout replaced the cause", err)
			}
		})
	}
}

// TestCancellationIsNotADeadline: a runner stopping (ctx cancelled, no
// deadline passed) is a cancellation, not a connection failure.
func TestCancellationIsNotADeadline(t *testing.T) {
	e, err := New(Options{TrustOnFirstUse: true, Password: []byte("x"), RetryInitial: time.Hour, RetryMax: time.Hour, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	e.dialFn = func(context.Context, string, ssh.PublicKey) (*ssh.Client, *verifier, error) {
		cancel()
		return nil, &verifier{}, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	_, _, _, f, err := e.connect(ctx, "192.0.2.1:22", nil)
	if f != domain.FailureCanceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("failure %s (%v), want a cancellation", f, err)
	}
}
