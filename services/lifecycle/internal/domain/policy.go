package domain

import (
	"math"
	"time"
)

// Policy holds the deadlines and retry rules of the state machine.
type Policy struct {
	// LaunchTimeout bounds Creating: from the create call to RUNNING with an IP.
	LaunchTimeout time.Duration
	// AfterCreatedHookTimeout bounds waiting for an after_created hook result.
	AfterCreatedHookTimeout time.Duration
	// JoinTimeout bounds Joined: from the hook's success to a Ready Node.
	JoinTimeout time.Duration
	// BeforeDeleteHookTimeout bounds waiting for a before_delete hook result.
	BeforeDeleteHookTimeout time.Duration
	// TerminateTimeout bounds waiting for a terminate result.
	TerminateTimeout time.Duration
	// MaxRetries bounds retries of a retryable failure of one step
	// (terminations are retried without bound: a VM must not leak).
	MaxRetries int
	// BackoffBase and BackoffMax shape the exponential backoff.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// Jitter is the +/- fraction applied to each backoff.
	Jitter float64
	// HistoryLimit bounds Instance.History.
	HistoryLimit int
	// NodeDeletedGrace is how long a Running instance whose Node was
	// deleted by someone else waits for the Node to register again before
	// it is replaced (0: at once).
	NodeDeletedGrace time.Duration
}

// DefaultPolicy returns the production defaults.
func DefaultPolicy() Policy {
	return Policy{
		LaunchTimeout:           10 * time.Minute,
		AfterCreatedHookTimeout: 15 * time.Minute,
		JoinTimeout:             15 * time.Minute,
		BeforeDeleteHookTimeout: 10 * time.Minute,
		TerminateTimeout:        10 * time.Minute,
		MaxRetries:              5,
		BackoffBase:             5 * time.Second,
		BackoffMax:              5 * time.Minute,
		Jitter:                  0.2,
		HistoryLimit:            32,
		NodeDeletedGrace:        5 * time.Minute,
	}
}

// Backoff returns the delay before retry number retries+1; r in [-1, 1]
// picks the jitter (callers pass a random value, tests a fixed one).
func (p Policy) Backoff(retries uint32, r float64) time.Duration {
	d := float64(p.BackoffBase) * math.Pow(2, float64(min(retries, 30)))
	d = math.Min(d, float64(p.BackoffMax))
	d *= 1 + p.Jitter*math.Max(-1, math.Min(1, r))
	return max(time.Duration(d), time.Millisecond)
}

// hookDeadline is how long lifecycle waits for a hook result: the policy's
// timeout, or longer when the hook's own timeout needs it (the result must
// have time to come back after the script is killed).
func hookDeadline(policy time.Duration, spec *HookSpec) time.Duration {
	if spec != nil && spec.Timeout+time.Minute > policy {
		return spec.Timeout + time.Minute
	}
	return policy
}
