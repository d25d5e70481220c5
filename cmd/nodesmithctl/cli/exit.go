package cli

import (
	"context"
	"errors"
	"strings"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/client"
)

// Exit codes of nodesmithctl (documented in docs/cli.md).
const (
	ExitOK           = 0 // success
	ExitError        = 1 // any other error
	ExitUsage        = 2 // bad flags or arguments
	ExitNotFound     = 3 // the object does not exist (404)
	ExitConflict     = 4 // a concurrent change or a state conflict (409, 412)
	ExitUnauthorized = 5 // missing, invalid or read-only token (401, 403)
	ExitTimeout      = 6 // --timeout passed before the condition held
)

// usageError marks an error in the command line itself.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(err error) error {
	if err == nil {
		return nil
	}
	return &usageError{err: err}
}

// ErrTimeout is returned when a --timeout expired.
var ErrTimeout = errors.New("timed out")

// ExitCode maps an error returned by the root command to the process exit
// code.
func ExitCode(err error) int {
	var ue *usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue), isCobraUsage(err):
		return ExitUsage
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return ExitTimeout
	case errors.Is(err, client.ErrNotFound):
		return ExitNotFound
	case errors.Is(err, client.ErrConflict):
		return ExitConflict
	case errors.Is(err, client.ErrUnauthorized), errors.Is(err, client.ErrForbidden):
		return ExitUnauthorized
	}
	return ExitError
}

// isCobraUsage recognises the errors cobra itself returns for a bad
// command line (it has no typed errors for them); never an answer of the
// API.
func isCobraUsage(err error) bool {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return false
	}
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "flag needs an argument", "invalid argument", "required flag", "if any flags in the group"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
