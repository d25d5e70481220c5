// Package testwait waits in tests for a condition to hold, so that tests
// wait on conditions rather than on fixed sleeps.
package testwait

import (
	"testing"
	"time"
)

// Poll is how often Until evaluates its condition.
const Poll = 20 * time.Millisecond

// Until evaluates cond every Poll until it holds; when it still does not
// hold after within, the test fails and stops, naming what it waited for.
func Until(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(Poll)
	}
}
