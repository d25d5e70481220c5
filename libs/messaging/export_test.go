package messaging

import "time"

// SetEnsureAttemptTimeout shortens Ensure's per-attempt timeout for a test.
func SetEnsureAttemptTimeout(d time.Duration) (restore func()) {
	old := ensureAttemptTimeout
	ensureAttemptTimeout = d
	return func() { ensureAttemptTimeout = old }
}
