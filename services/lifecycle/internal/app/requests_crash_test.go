package app_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// A leader applies an operation and dies before its answer arrives: after
// every possible number of its writes. The gateway retries with the same
// request id, and the retry reaches the next leader (a new App on the same
// store). The operation must take effect exactly once: the group record
// says whether the first attempt applied it.
func TestRepeatAtTheNextLeaderIsNotAppliedAgain(t *testing.T) {
	ctx := context.Background()
	type op struct {
		name string
		// setup brings the group to its starting point (with a leader that
		// then steps down cleanly).
		setup func(w *world, a *app.App)
		// run is the operation; fp its fingerprint.
		run func(ctx context.Context, a *app.App) (app.Revisions, error)
		// target is the target and live count once it applied once.
		target int
		// check, if set, checks the commands the operation caused.
		check func(t *testing.T, w *world)
	}
	running := func(n int) func(w *world, a *app.App) {
		return func(w *world, a *app.App) {
			if _, err := a.IncreaseSize(ctx, "g", n); err != nil {
				t.Fatal(err)
			}
			w.run(a, nil)
		}
	}
	// victims are the first two Running instances (by id).
	victims := func(a *app.App) []app.NodeRef {
		var out []app.NodeRef
		for _, in := range a.Instances("g") {
			if in.State == domain.StateRunning && len(out) < 2 {
				out = append(out, app.NodeRef{ProviderID: in.ProviderID})
			}
		}
		return out
	}
	ops := []op{
		{
			name:   "IncreaseSize",
			setup:  running(2),
			run:    func(ctx context.Context, a *app.App) (app.Revisions, error) { return a.IncreaseSize(ctx, "g", 3) },
			target: 5,
		},
		{
			// Two Running instances and two Pending ones: a decrease
			// cancels a Pending one; applied twice it would cancel both.
			name: "DecreaseTargetSize",
			setup: func(w *world, a *app.App) {
				running(2)(w, a)
				if _, err := a.IncreaseSize(ctx, "g", 2); err != nil {
					t.Fatal(err)
				}
			},
			run: func(ctx context.Context, a *app.App) (app.Revisions, error) {
				return a.DecreaseTargetSize(ctx, "g", -1)
			},
			target: 3,
		},
		{
			// Applied twice (target lowered, nodes not yet released) it
			// would lower the target by 4.
			name:  "DeleteNodes",
			setup: running(5),
			run: func(ctx context.Context, a *app.App) (app.Revisions, error) {
				return a.DeleteNodes(ctx, "g", victims(a))
			},
			target: 3,
		},
		{
			// An absolute target: applied again it changes nothing here
			// (TestAppliedRequestsAcrossRestarts has a repeat that would
			// undo a later change).
			name:   "SetTargetSize",
			setup:  running(2),
			run:    func(ctx context.Context, a *app.App) (app.Revisions, error) { return a.SetTargetSize(ctx, "g", 4) },
			target: 4,
		},
		{
			// An operator's force-delete skips the before_delete hook,
			// also when the next leader finishes the release.
			name:  "ForceDelete",
			setup: running(3),
			run: func(ctx context.Context, a *app.App) (app.Revisions, error) {
				for _, in := range a.Instances("g") {
					if in.State == domain.StateRunning {
						return a.ActOnInstance(ctx, in.ID, app.ActionForceDelete)
					}
				}
				return app.Revisions{}, errors.New("no Running instance")
			},
			target: 2,
			check: func(t *testing.T, w *world) {
				for _, h := range w.stream.Snapshot().Hooks {
					if h.Kind == domain.HookBeforeDelete {
						t.Errorf("before_delete hook ran for %s: a force-delete skips it", h.InstanceID)
					}
				}
			},
		},
	}
	g := group("g", 0, 10, 0)
	const id, fp = "req-1", "fingerprint-1"
	// once sends the operation under the request id, through the same path
	// as the ops responder (App.Once).
	once := func(a *app.App, o op) (app.Revisions, error) {
		return a.Once(ctx, id, fp, func(ctx context.Context) (app.Revisions, error) { return o.run(ctx, a) })
	}
	start := func(t *testing.T, a *app.App) {
		t.Helper()
		if err := a.SetConfig(ctx, []domain.NodeGroup{g}); err != nil {
			t.Fatal(err)
		}
		if err := a.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// prepare returns a world at the operation's starting point.
	prepare := func(t *testing.T, o op) *world {
		w := newWorld(t)
		a0 := w.newApp(w.store, w.stream, 0)
		start(t, a0)
		o.setup(w, a0)
		a0.Stop()
		return w
	}

	for _, o := range ops {
		t.Run(o.name, func(t *testing.T) {
			// Count the writes of the operation alone.
			w := prepare(t, o)
			a1 := w.newApp(w.store, w.stream, 1)
			start(t, a1)
			before := w.store.Writes()
			if _, err := once(a1, o); err != nil {
				t.Fatal(err)
			}
			writes := w.store.Writes() - before
			if writes == 0 {
				t.Fatal("the operation wrote nothing")
			}

			// n == writes: the first attempt completed, only its answer was
			// lost. The retry reaches the next leader before its first
			// dispatcher pass, or after it has settled (which finishes
			// what the first attempt left undone without any retry).
			for n := 0; n <= writes; n++ {
				for _, passFirst := range []bool{false, true} {
					if passFirst && n == 0 {
						continue // nothing applied: the retry is a first application in a world that moved on
					}
					t.Run(fmt.Sprintf("leader dies after %d of %d writes, pass first %v", n, writes, passFirst), func(t *testing.T) {
						w := prepare(t, o)
						cs := &crashStore{Store: w.store}
						a1 := w.newApp(cs, crashCommands{Commands: w.stream, store: cs}, 1)
						start(t, a1)
						cs.mu.Lock()
						cs.left = n
						cs.mu.Unlock()
						_, _ = once(a1, o) // its answer never arrives
						a1.Stop()
						groupRev := w.groupRevision(t, "g")

						a2 := w.newApp(w.store, crashCommands{Commands: w.stream}, 2)
						start(t, a2)
						if passFirst {
							// The group write (every operation's first) was
							// committed: the operation counts as applied, and
							// the next leader completes it with no retry.
							w.run(a2, nil)
							if grp, _ := a2.Group("g"); grp.TargetSize != o.target || liveCount(a2) != o.target {
								t.Errorf("before any retry: target %d, live %d; want %d and %d", grp.TargetSize, liveCount(a2), o.target, o.target)
							}
						}
						revs, err := once(a2, o)
						if err != nil {
							t.Fatalf("retry at the next leader: %v", err)
						}
						if revs.Groups < groupRev {
							t.Errorf("answered group revision %d, below %d the first attempt left: read-your-writes broken", revs.Groups, groupRev)
						}
						// A second retry (its answer lost too) changes nothing.
						if _, err := once(a2, o); err != nil {
							t.Fatalf("second retry: %v", err)
						}
						w.run(a2, nil)
						grp, _ := a2.Group("g")
						live := 0
						for _, in := range a2.Instances("g") {
							if in.Live() {
								live++
								if in.State != domain.StateRunning {
									t.Errorf("%s stuck in %s", in.ID, in.State)
								}
							}
						}
						if grp.TargetSize != o.target || live != o.target {
							t.Errorf("target %d, live %d; want %d and %d (applied exactly once)", grp.TargetSize, live, o.target, o.target)
						}
						if o.check != nil {
							o.check(t, w)
						}
					})
				}
			}
		})
	}
}

func liveCount(a *app.App) int {
	n := 0
	for _, in := range a.Instances("g") {
		if in.Live() {
			n++
		}
	}
	return n
}

// groupRevision reads a group's current revision from the store.
func (w *world) groupRevision(t *testing.T, id string) uint64 {
	t.Helper()
	v, err := w.store.GetGroup(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return v.Revision
}

// The persisted record answers across leaders for the window only, stays
// bounded, and refuses an id reused for another operation.
func TestAppliedRequestsAcrossRestarts(t *testing.T) {
	increase := func(h *harness, id string, delta int) (app.Revisions, error) {
		return h.app.Once(h.ctx, id, fmt.Sprintf("increase/%d", delta), func(ctx context.Context) (app.Revisions, error) {
			return h.app.IncreaseSize(ctx, "g", delta)
		})
	}
	groups := []domain.NodeGroup{group("g", 0, 100, 0)}
	opts := withOptions(func(o *app.Options) { o.RequestsPerGroup = 3 })

	t.Run("a repeat after a restart is answered, not applied", func(t *testing.T) {
		h := newHarness(t, groups, opts)
		first := h.ok(increase(h, "r", 2))
		h.restart(nil)
		again := h.ok(increase(h, "r", 2))
		if h.target("g") != 2 {
			t.Errorf("target %d, want 2", h.target("g"))
		}
		if again.Groups < first.Groups || again.Instances < first.Instances {
			t.Errorf("answered revisions %+v, below the first attempt's %+v", again, first)
		}
	})

	t.Run("an id reused for another operation is refused after a restart", func(t *testing.T) {
		h := newHarness(t, groups, opts)
		h.ok(increase(h, "r", 2))
		h.restart(nil)
		_, err := increase(h, "r", 3)
		wantCode(t, err, contract.CodeInvalidArgument)
		if h.target("g") != 2 {
			t.Errorf("target %d, want 2", h.target("g"))
		}
	})

	t.Run("after the window the id is applied again", func(t *testing.T) {
		h := newHarness(t, groups, opts)
		h.ok(increase(h, "r", 2))
		h.clock.Advance(app.DefaultOptions().RequestTTL)
		h.restart(nil)
		h.ok(increase(h, "r", 2))
		if h.target("g") != 4 {
			t.Errorf("target %d, want 4", h.target("g"))
		}
	})

	t.Run("the record is bounded: expired and surplus records are dropped", func(t *testing.T) {
		h := newHarness(t, groups, opts)
		for i := range 5 {
			h.ok(increase(h, fmt.Sprintf("r%d", i), 1))
			h.clock.Advance(time.Second)
		}
		grp, _ := h.app.Group("g")
		if got := appliedIDs(grp); fmt.Sprint(got) != "[r2 r3 r4]" {
			t.Errorf("records %v, want the newest 3", got)
		}
		h.clock.Advance(app.DefaultOptions().RequestTTL - 2*time.Second) // r4 is 1s inside the window, r3 just out
		h.ok(increase(h, "late", 1))
		grp, _ = h.app.Group("g")
		if got := appliedIDs(grp); fmt.Sprint(got) != "[r4 late]" {
			t.Errorf("records %v, want r4 (still in the window) and late", got)
		}
	})

	t.Run("a refusal writes no record: the repeat re-evaluates", func(t *testing.T) {
		h := newHarness(t, []domain.NodeGroup{group("g", 0, 3, 0)}, opts)
		_, err := increase(h, "r", 4)
		wantCode(t, err, contract.CodeOutOfRange)
		h.restart([]domain.NodeGroup{group("g", 0, 5, 0)})
		h.ok(increase(h, "r", 4))
		if h.target("g") != 4 {
			t.Errorf("target %d, want 4", h.target("g"))
		}
	})

	t.Run("a repeated SetTargetSize does not undo a later change", func(t *testing.T) {
		h := newHarness(t, groups, opts)
		set := func() (app.Revisions, error) {
			return h.app.Once(h.ctx, "s", "set/4", func(ctx context.Context) (app.Revisions, error) {
				return h.app.SetTargetSize(ctx, "g", 4)
			})
		}
		h.ok(set())
		h.ok(h.app.IncreaseSize(h.ctx, "g", 1))
		h.restart(nil)
		h.ok(set())
		if h.target("g") != 5 {
			t.Errorf("target %d, want 5", h.target("g"))
		}
	})

	t.Run("a configuration change keeps the records", func(t *testing.T) {
		h := newHarness(t, groups, opts)
		h.ok(increase(h, "r", 2))
		h.restart([]domain.NodeGroup{group("g", 0, 50, 0)}) // the file changed the group
		h.ok(increase(h, "r", 2))
		if h.target("g") != 2 {
			t.Errorf("target %d, want 2", h.target("g"))
		}
	})
}

func appliedIDs(g domain.NodeGroup) []string {
	var out []string
	for _, r := range g.Applied {
		out = append(out, r.ID)
	}
	return out
}

var errKV = errors.New("kv unavailable")

// A release that fails midway (an instance write fails after the group
// write) counts as applied when the group records its request: the target
// stays lowered, and the retry (or the next pass) releases the rest, so
// the retry neither lowers the target again nor restores it. Without a
// request id the target is restored instead, so that a retry lowers it
// only once.
func TestPartlyFailedRelease(t *testing.T) {
	tests := []struct {
		name string
		// op runs the operation at the start of the group (4 Running, 2
		// Pending); it releases 2. victims are the first two Running.
		op func(ctx context.Context, h *harness, victims []app.NodeRef) (app.Revisions, error)
		// fail are the injected results of its writes: the group write
		// succeeds, the second instance write fails.
		fail []error
		// idempotent: a retry without a request id converges too (a
		// relative decrease does not: it is why the id exists).
		idempotent bool
	}{
		{
			name: "DeleteNodes",
			op: func(ctx context.Context, h *harness, victims []app.NodeRef) (app.Revisions, error) {
				return h.app.DeleteNodes(ctx, "g", victims)
			},
			fail:       []error{nil, nil, errKV},
			idempotent: true,
		},
		{
			// Relative: applied again after a restore it would cancel 4.
			name: "DecreaseTargetSize",
			op: func(ctx context.Context, h *harness, _ []app.NodeRef) (app.Revisions, error) {
				return h.app.DecreaseTargetSize(ctx, "g", -2)
			},
			fail: []error{nil, nil, errKV},
		},
	}
	for _, tc := range tests {
		for _, withID := range []bool{true, false} {
			if !withID && !tc.idempotent {
				continue
			}
			t.Run(fmt.Sprintf("%s, request id %v", tc.name, withID), func(t *testing.T) {
				h := newHarness(t, []domain.NodeGroup{group("g", 0, 10, 4)})
				h.settle()
				var victims []app.NodeRef
				for _, in := range h.instances("g")[:2] {
					victims = append(victims, app.NodeRef{ProviderID: in.ProviderID})
				}
				h.ok(h.app.IncreaseSize(h.ctx, "g", 2)) // 2 Pending, not dispatched
				send := func() (app.Revisions, error) {
					if !withID {
						return tc.op(h.ctx, h, victims)
					}
					return h.app.Once(h.ctx, "r", tc.name, func(ctx context.Context) (app.Revisions, error) { return tc.op(ctx, h, victims) })
				}
				h.store.FailNext(tc.fail...)
				_, err := send()
				wantCode(t, err, contract.CodeUnavailable)
				grp, _ := h.app.Group("g")
				if want := map[bool]int{true: 4, false: 5}[withID]; grp.TargetSize != want {
					t.Fatalf("after the failed release: target %d, want %d", grp.TargetSize, want)
				}
				if withID {
					h.restart(nil) // the retry reaches the next leader
				}
				h.ok(send())
				if withID {
					h.ok(send()) // and once more: nothing changes
				}
				grp, _ = h.app.Group("g")
				if grp.TargetSize != 4 || liveCount(h.app) != 4 {
					t.Errorf("target %d, live %d; want 4 and 4", grp.TargetSize, liveCount(h.app))
				}
			})
		}
	}
}
