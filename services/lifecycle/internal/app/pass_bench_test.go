package app_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/memory"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// benchApp returns a started App whose store holds running Running
// instances at rest in 10 groups, plus the group "new" (empty).
func benchApp(b *testing.B, running int) (*app.App, *memory.Commands) {
	b.Helper()
	ctx := context.Background()
	store := memory.NewStore()
	var groups []domain.NodeGroup
	for i := range 10 {
		g := group(fmt.Sprintf("g%d", i), 0, running, running/10)
		groups = append(groups, g)
		for j := range running / 10 {
			in := domain.NewInstance(domain.NewInstanceID(g.ID, fmt.Sprintf("%08d", j)), g.ID, t0)
			in.State, in.CloudID, in.PrivateIP = domain.StateRunning, fmt.Sprintf("ins-%d-%d", i, j), "10.0.0.1"
			if _, err := store.CreateInstance(ctx, in); err != nil {
				b.Fatal(err)
			}
		}
	}
	groups = append(groups, group("new", 0, 1_000_000, 0))
	cmds := &memory.Commands{}
	a := app.New(app.DefaultOptions(), app.Deps{
		Store: store, Commands: cmds, Clock: memory.NewClock(t0),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err := a.SetConfig(ctx, groups); err != nil {
		b.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		b.Fatal(err)
	}
	a.Pass(ctx)
	return a, cmds
}

// BenchmarkPassIdle is a dispatcher pass with nothing to do beside running
// instances at rest: what every wake-up costs before it does any work.
func BenchmarkPassIdle(b *testing.B) {
	for _, n := range []int{1000, 10_000, 50_000} {
		b.Run(fmt.Sprintf("running=%d", n), func(b *testing.B) {
			a, _ := benchApp(b, n)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				a.Pass(ctx)
			}
		})
	}
}

// BenchmarkScaleUpOne takes one instance from IncreaseSize(1) to Running
// (create batch, created, observed running, hook succeeded, with the
// dispatcher passes between) beside running instances at rest: the
// dispatcher's and the state machine's cost per instance of a scale-up.
func BenchmarkScaleUpOne(b *testing.B) {
	for _, n := range []int{1000, 10_000, 50_000} {
		b.Run(fmt.Sprintf("running=%d", n), func(b *testing.B) {
			a, cmds := benchApp(b, n)
			ctx := context.Background()
			event := func(id string, ev domain.Event) {
				if err := a.HandleEvent(ctx, id, ev); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				if i%500 == 0 {
					// Start over: every instance added stays in its group,
					// and the cost per op must not depend on b.N.
					b.StopTimer()
					a, cmds = benchApp(b, n)
					b.StartTimer()
				}
				cmds.Reset()
				if _, err := a.IncreaseSize(ctx, "new", 1); err != nil {
					b.Fatal(err)
				}
				a.Pass(ctx)
				c := cmds.Snapshot()
				if len(c.Creates) != 1 {
					b.Fatalf("%d create commands", len(c.Creates))
				}
				r := c.Creates[0].Instances[0]
				event(r.InstanceID, domain.CloudCreated{Attempt: r.Attempt, BatchID: c.Creates[0].BatchID, CloudID: fmt.Sprintf("ins-new-%d", i)})
				a.Pass(ctx)
				if w := cmds.Snapshot().Watches; len(w) != 0 {
					b.Fatalf("%d watch commands: the create command watches", len(w))
				}
				event(r.InstanceID, domain.CloudObserved{Attempt: r.Attempt, State: domain.CloudRunning, PrivateIP: "10.0.0.2"})
				a.Pass(ctx)
				h := cmds.Snapshot().Hooks
				if len(h) != 1 {
					b.Fatalf("%d hook commands", len(h))
				}
				event(r.InstanceID, domain.HookFinished{Attempt: h[0].Attempt, Kind: h[0].Kind, Succeeded: true})
				a.Pass(ctx)
			}
		})
	}
}
