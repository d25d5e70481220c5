package app_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// increaseOnce is IncreaseSize(group, delta) under a request id.
func (h *harness) increaseOnce(id, group string, delta int) (app.Revisions, error) {
	fp := "increase/" + group + "/" + string(rune('0'+delta))
	return h.app.Once(h.ctx, id, fp, func(ctx context.Context) (app.Revisions, error) {
		return h.app.IncreaseSize(ctx, group, delta)
	})
}

func TestRequestIDAppliesAnOperationOnce(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 10, 0)})

	first := h.ok(h.increaseOnce("req-1", "g", 2))
	for range 2 {
		again := h.ok(h.increaseOnce("req-1", "g", 2))
		if again != first {
			t.Errorf("repeat answered %+v, want the first outcome %+v", again, first)
		}
	}
	if h.target("g") != 2 || len(h.instances("g")) != 2 {
		t.Fatalf("the same request id sent 3 times: target %d, %d records; want 2, 2", h.target("g"), len(h.instances("g")))
	}

	// Different ids are different operations.
	h.ok(h.increaseOnce("req-2", "g", 2))
	h.ok(h.increaseOnce("req-3", "g", 2))
	if h.target("g") != 6 {
		t.Errorf("three ids: target %d, want 6", h.target("g"))
	}
	// No id: no deduplication.
	h.ok(h.increaseOnce("", "g", 1))
	h.ok(h.increaseOnce("", "g", 1))
	if h.target("g") != 8 {
		t.Errorf("without ids: target %d, want 8", h.target("g"))
	}
}

func TestRequestIDOutcomes(t *testing.T) {
	tests := []struct {
		name string
		// run sends the first attempt and prepares the repeat.
		run func(h *harness)
		// wantTarget is the target after the repeat of the same id.
		wantTarget int
		wantCode   domain.Code
	}{
		{
			name: "a refusal is final: the repeat gets it without re-evaluating",
			run: func(h *harness) {
				h.ok(h.app.SetTargetSize(h.ctx, "g", 5))
				_, err := h.increaseOnce("r", "g", 1) // above max 5
				wantCode(h.t, err, contract.CodeOutOfRange)
				h.ok(h.app.SetTargetSize(h.ctx, "g", 4)) // now it would fit
			},
			wantTarget: 4, wantCode: contract.CodeOutOfRange,
		},
		{
			name: "storage trouble is not final: the repeat applies the operation",
			run: func(h *harness) {
				h.store.FailNext(errors.New("kv down"))
				_, err := h.increaseOnce("r", "g", 1)
				wantCode(h.t, err, contract.CodeUnavailable)
			},
			wantTarget: 1,
		},
		{
			name: "an id reused for another operation is refused",
			run: func(h *harness) {
				h.ok(h.app.Once(h.ctx, "r", "another operation", func(ctx context.Context) (app.Revisions, error) {
					return h.app.SetTargetSize(ctx, "g", 3)
				}))
			},
			wantTarget: 3, wantCode: contract.CodeInvalidArgument,
		},
		{
			name: "after the window the id is forgotten",
			run: func(h *harness) {
				h.ok(h.increaseOnce("r", "g", 1))
				h.clock.Advance(app.DefaultOptions().RequestTTL)
			},
			wantTarget: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, []domain.NodeGroup{group("g", 0, 5, 0)})
			tc.run(h)
			_, err := h.increaseOnce("r", "g", 1)
			if domain.CodeOf(err) != tc.wantCode {
				t.Errorf("repeat: %v, want code %s", err, tc.wantCode)
			}
			if h.target("g") != tc.wantTarget {
				t.Errorf("target %d, want %d", h.target("g"), tc.wantTarget)
			}
		})
	}
}

// Concurrent attempts of one request (a retry while the first still runs)
// apply it once; the repeats wait for and share its outcome.
func TestRequestIDConcurrentRepeats(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 50, 0)})
	var wg sync.WaitGroup
	results := make([]app.Revisions, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			revs, err := h.increaseOnce("same", "g", 3)
			if err != nil {
				t.Error(err)
			}
			results[i] = revs
		}()
	}
	wg.Wait()
	if h.target("g") != 3 {
		t.Errorf("target %d, want 3", h.target("g"))
	}
	for _, r := range results {
		if r != results[0] {
			t.Errorf("outcomes differ: %+v vs %+v", r, results[0])
		}
	}
}

// The log is bounded: beyond RequestLogSize the oldest ids are forgotten
// (and beyond RequestsPerGroup by the group record).
func TestRequestLogIsBounded(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 50, 0)}, withOptions(func(o *app.Options) {
		o.RequestLogSize = 2
		o.RequestsPerGroup = 2
		o.RequestTTL = time.Hour
	}))
	for _, id := range []string{"a", "b", "c"} {
		h.ok(h.increaseOnce(id, "g", 1))
	}
	h.ok(h.increaseOnce("c", "g", 1)) // remembered
	if h.target("g") != 3 {
		t.Fatalf("target %d, want 3", h.target("g"))
	}
	h.ok(h.increaseOnce("a", "g", 1)) // forgotten: applied again
	if h.target("g") != 4 {
		t.Errorf("target %d, want 4 (the oldest id evicted)", h.target("g"))
	}
}

// The group records' requests are found through an index kept with the
// group cache: it must follow every change of the cache (load, a write, a
// refresh after a conflict, a create, a delete), or a repeat would be
// applied again, or a record gone from its group found. The in-memory log
// keeps only the last id here, so repeats reach the group records.
func TestAppliedRequestsIndexFollowsTheGroups(t *testing.T) {
	groups := []domain.NodeGroup{group("g", 0, 10, 0)}
	h := newHarness(t, groups, withOptions(func(o *app.Options) {
		o.RequestLogSize = 1
		o.RequestsPerGroup = 2
	}))
	check := func(step string) {
		t.Helper()
		if err := h.app.CheckAppliedIndex(); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	h.ok(h.increaseOnce("a", "g", 1))
	check("write")

	// Loaded by the next leader.
	h.restart(groups)
	check("load")
	h.ok(h.increaseOnce("a", "g", 1))
	if h.target("g") != 1 {
		t.Fatalf("repeat after a restart: target %d, want 1", h.target("g"))
	}

	// Applied by another leader: this one's write conflicts, and the
	// refreshed group answers the repeat.
	other := h.newApp()
	if err := other.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Once(h.ctx, "b", "increase/g/1", func(ctx context.Context) (app.Revisions, error) {
		return other.IncreaseSize(ctx, "g", 1)
	}); err != nil {
		t.Fatal(err)
	}
	other.Stop()
	h.ok(h.increaseOnce("b", "g", 1))
	check("refresh")
	if h.target("g") != 2 {
		t.Fatalf("repeat of another leader's request: target %d, want 2", h.target("g"))
	}

	// A later write keeps the newest two records: "a" is gone and a repeat
	// applies it again.
	h.ok(h.increaseOnce("c", "g", 1))
	check("prune")
	h.ok(h.increaseOnce("a", "g", 1))
	if h.target("g") != 4 {
		t.Fatalf("repeat of a pruned request: target %d, want 4", h.target("g"))
	}

	// A group created under a request records it; deleted, it takes the
	// record along.
	put := func() (app.Revisions, error) {
		return h.app.Once(h.ctx, "p", "put/x", func(ctx context.Context) (app.Revisions, error) {
			return h.app.PutGroup(ctx, app.PutGroupRequest{Group: group("x", 0, 10, 0)})
		})
	}
	h.ok(put())
	check("create")
	h.ok(h.increaseOnce("d", "g", 1)) // the log forgets "p"
	h.ok(put())                       // not AlreadyExists: the group record answers
	h.ok(h.app.DeleteGroup(h.ctx, "x", 0))
	check("delete")
	h.ok(h.increaseOnce("e", "g", 1))
	h.ok(put()) // applied again: the group is created anew
	if _, ok := h.app.Group("x"); !ok {
		t.Fatal("repeat of a deleted group's request: group x not created again")
	}
	check("create again")
}
