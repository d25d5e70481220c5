// Package resulttest is the contract every ports.ResultPublisher
// implementation must meet. The fake and the JetStream adapter (on a real
// server with nodesmith's accounts) both run it, so the fake the runner's
// tests use cannot drift from the event stream lifecycle reads.
package resulttest

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/ports"
)

// Harness is one implementation under test.
type Harness struct {
	Publisher ports.ResultPublisher
	// Stored lists the results stored for instance, oldest first, as
	// lifecycle receives them.
	Stored func(t *testing.T, instance string) []domain.Result
}

// instances keeps the subtests of one run apart, for an implementation
// whose stream and duplicate window outlive a subtest.
var instances atomic.Int64

// Run runs the contract against publishers made by newHarness.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Run("a result is stored with every field lifecycle reads", func(t *testing.T) {
		h, id := newHarness(t), instance()
		r := Sample(id, 1)
		mustPublish(t, h, r)
		assertStored(t, h, id, r)
	})

	t.Run("a result is stored once per instance, kind and attempt", func(t *testing.T) {
		h, id := newHarness(t), instance()
		first := Sample(id, 1)
		mustPublish(t, h, first)
		again := first
		again.Runner, again.ExitCode = "other-replica", 9 // a re-run's result: the first stays
		mustPublish(t, h, again)
		next := Sample(id, 2)
		mustPublish(t, h, next)
		other := Sample(id, 1)
		other.Kind = domain.KindBeforeDelete
		mustPublish(t, h, other)
		assertStored(t, h, id, first, next, other)
	})

	t.Run("a failed publication stores nothing and its retry stores the result once", func(t *testing.T) {
		h, id := newHarness(t), instance()
		done, cancel := context.WithCancel(context.Background())
		cancel()
		r := Sample(id, 1)
		if err := h.Publisher.Publish(done, r); err == nil {
			t.Error("Publish with a done context = nil, want an error")
		}
		assertStored(t, h, id)
		mustPublish(t, h, r)
		mustPublish(t, h, r)
		assertStored(t, h, id, r)
	})
}

func instance() string { return fmt.Sprintf("ins-%d", instances.Add(1)) }

// Sample returns a result with every field set.
func Sample(instance string, attempt uint32) domain.Result {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	return domain.Result{
		InstanceID: instance, Attempt: attempt, Kind: domain.KindAfterCreated, Succeeded: false, Skipped: false,
		ExitCode: 7, OutputTail: "boom\n", Error: "script exited with status 7", Retryable: true,
		Failure: domain.FailureExit, HostKey: "ssh-ed25519 AAAA", StartedAt: at, FinishedAt: at.Add(time.Second), Runner: "r1",
	}
}

func mustPublish(t *testing.T, h Harness, r domain.Result) {
	t.Helper()
	if err := h.Publisher.Publish(context.Background(), r); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

// assertStored compares the stored results with want. Failure does not
// travel (lifecycle reads Succeeded, Retryable, ExitCode and Error): it is
// left out of the comparison.
func assertStored(t *testing.T, h Harness, instance string, want ...domain.Result) {
	t.Helper()
	got := h.Stored(t, instance)
	for i := range got {
		got[i].Failure = domain.FailureNone
	}
	w := make([]domain.Result, len(want))
	for i, r := range want {
		r.Failure = domain.FailureNone
		w[i] = r
	}
	if len(got) == 0 && len(w) == 0 {
		return
	}
	if !reflect.DeepEqual(got, w) {
		t.Errorf("stored results\n  %+v\nwant\n  %+v", got, w)
	}
}
