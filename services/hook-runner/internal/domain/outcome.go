package domain

import (
	"fmt"
	"time"
)

// Failure classifies why a run did not succeed. The class, not the error
// text, decides whether lifecycle should try the hook again.
type Failure int

// Failure classes.
const (
	// FailureNone: the script ran and exited 0.
	FailureNone Failure = iota
	// FailureInvalid: the command cannot run as given (empty host, bad
	// environment name, unsupported interpreter, unparsable pinned key).
	FailureInvalid
	// FailureConnection: the VM could not be reached, or the connection or
	// session broke before the script reported an exit status.
	FailureConnection
	// FailureAuth: the VM refused every credential offered.
	FailureAuth
	// FailureHostKey: the VM's host key did not match the pin or
	// known_hosts, was revoked, or is unknown and trust-on-first-use is off.
	FailureHostKey
	// FailureTimeout: the hook's deadline passed (while connecting or while
	// the script ran); the remote command was killed.
	FailureTimeout
	// FailureExit: the script exited non-zero or died of a signal.
	FailureExit
	// FailureCanceled: the runner itself stopped the run (shutdown). It is
	// not the hook's outcome: no result is published and the command is
	// delivered again, to this or another replica.
	FailureCanceled
)

// String names the class for logs and metrics labels.
func (f Failure) String() string {
	switch f {
	case FailureNone:
		return "none"
	case FailureInvalid:
		return "invalid"
	case FailureConnection:
		return "connection"
	case FailureAuth:
		return "auth"
	case FailureHostKey:
		return "host_key"
	case FailureTimeout:
		return "timeout"
	case FailureExit:
		return "exit"
	case FailureCanceled:
		return "canceled"
	default:
		return fmt.Sprintf("failure(%d)", int(f))
	}
}

// Retryable reports whether running the hook again may help. A VM that is
// still booting, a slow script or a script that failed on a transient
// condition may succeed next time; a host-key mismatch (possible
// man-in-the-middle), refused credentials or an invalid command will not,
// and retrying them would only hide the problem.
func (f Failure) Retryable() bool {
	switch f {
	case FailureConnection, FailureTimeout, FailureExit, FailureCanceled:
		return true
	default:
		return false
	}
}

// NoExitCode is the exit code of a run that did not reach an exit status.
const NoExitCode = -1

// Execution is what an executor reports about one run.
type Execution struct {
	// ExitCode is the script's exit status (128+n when killed by signal n,
	// as a shell reports it), or NoExitCode.
	ExitCode int
	// Failure is FailureNone exactly when the script exited 0.
	Failure Failure
	// Err describes the failure for people; nil when Failure is FailureNone.
	Err error
	// HostKey is the host key the VM presented (authorized_keys format)
	// when it was trusted by pin or on first use, so lifecycle can pin it.
	// Empty when known_hosts (or a host CA) vouched for the VM.
	HostKey string
	// ConnectAttempts counts TCP+SSH handshakes tried; Connected reports
	// whether one of them succeeded.
	ConnectAttempts int
	Connected       bool
}

// Result is the outcome of a hook run as reported to lifecycle.
type Result struct {
	InstanceID string
	Attempt    uint32
	Kind       Kind
	Succeeded  bool
	// Skipped: the hook had no script, nothing ran.
	Skipped bool
	// ExitCode is NoExitCode when the script did not run to an exit status.
	ExitCode int
	// OutputTail holds the last OutputTailSize bytes of combined output.
	OutputTail string
	Error      string
	Retryable  bool
	Failure    Failure
	HostKey    string
	StartedAt  time.Time
	FinishedAt time.Time
	// Runner names the replica that ran the hook.
	Runner string
}

// NewResult turns an execution of h into the result lifecycle receives.
func NewResult(h Hook, ex Execution, outputTail, runner string, started, finished time.Time) Result {
	r := Result{
		InstanceID: h.InstanceID,
		Attempt:    h.Attempt,
		Kind:       h.Kind,
		Succeeded:  ex.Failure == FailureNone,
		ExitCode:   ex.ExitCode,
		OutputTail: outputTail,
		Failure:    ex.Failure,
		HostKey:    ex.HostKey,
		StartedAt:  started,
		FinishedAt: finished,
		Runner:     runner,
	}
	if !r.Succeeded {
		r.Retryable = ex.Failure.Retryable()
		if ex.Err != nil {
			r.Error = ex.Err.Error()
		} else {
			r.Error = ex.Failure.String()
		}
	}
	return r
}

// SkippedResult is the result of a hook without a script.
func SkippedResult(h Hook, runner string, at time.Time) Result {
	return Result{
		InstanceID: h.InstanceID,
		Attempt:    h.Attempt,
		Kind:       h.Kind,
		Succeeded:  true,
		Skipped:    true,
		ExitCode:   NoExitCode,
		StartedAt:  at,
		FinishedAt: at,
		Runner:     runner,
	}
}
