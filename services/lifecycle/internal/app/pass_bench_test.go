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
func benchApp(b *testing.B, running int) *app.App {
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
	a := app.New(app.DefaultOptions(), app.Deps{
		Store: store, Commands: &memory.Commands{}, Clock: memory.NewClock(t0),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err := a.SetConfig(ctx, groups); err != nil {
		b.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		b.Fatal(err)
	}
	a.Pass(ctx)
	return a
}

// BenchmarkPassIdle is a dispatcher pass with nothing to do beside running
// instances at rest: what every wake-up costs before it does any work.
func BenchmarkPassIdle(b *testing.B) {
	for _, n := range []int{1000, 10_000, 50_000} {
		b.Run(fmt.Sprintf("running=%d", n), func(b *testing.B) {
			a := benchApp(b, n)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				a.Pass(ctx)
			}
		})
	}
}

// BenchmarkPassScaleUp is one IncreaseSize(1) and the pass that batches
// and publishes its creation, beside running instances at rest.
func BenchmarkPassScaleUp(b *testing.B) {
	for _, n := range []int{1000, 10_000} {
		b.Run(fmt.Sprintf("running=%d", n), func(b *testing.B) {
			a := benchApp(b, n)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.IncreaseSize(ctx, "new", 1); err != nil {
					b.Fatal(err)
				}
				a.Pass(ctx)
			}
		})
	}
}
