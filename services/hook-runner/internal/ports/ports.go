// Package ports declares what the hook runner's application needs from the
// outside world, with the error contract of each method.
package ports

import (
	"context"
	"io"

	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
)

// Executor runs scripts on hosts.
type Executor interface {
	// Run runs cmd.Script on cmd.Host with cmd.Env exported, streaming the
	// script's standard output and standard error to stdout and stderr as
	// they arrive (each writer is used from one goroutine at a time).
	//
	// ctx bounds the whole run: connecting (with retries while the host is
	// unreachable), the script and tearing down. When ctx ends the remote
	// command is killed before Run returns.
	//
	// Run never fails with a Go error: every outcome is described by the
	// returned Execution (the output itself went to the writers; callers
	// keep what they need, e.g. a domain.Tail). Its Failure is:
	//   - FailureNone when the script exited 0;
	//   - FailureExit for a non-zero exit or a death by signal (ExitCode set);
	//   - FailureConnection when no connection could be made (refused or
	//     timed-out attempts are retried with backoff until ctx's deadline;
	//     the error names the last cause) or the session broke before an
	//     exit status arrived;
	//   - FailureAuth when the host refused every credential (not retried);
	//   - FailureHostKey when the host key failed verification (not retried);
	//   - FailureTimeout when ctx's deadline passed while the script ran;
	//   - FailureCanceled when ctx was cancelled without a deadline passing;
	//   - FailureInvalid when cmd cannot be run as given (empty host, invalid
	//     environment, unsupported interpreter, unparsable pinned key); no
	//     connection is attempted.
	Run(ctx context.Context, cmd domain.Command, stdout, stderr io.Writer) domain.Execution
}

// ResultPublisher reports hook results to lifecycle.
type ResultPublisher interface {
	// Publish delivers r durably. It is idempotent per (instance, kind,
	// attempt): the same result published again within the stream's
	// duplicate window is stored once. An error means r may not have been
	// stored; the caller may publish it again.
	Publish(ctx context.Context, r domain.Result) error
}
