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

// requestsBenchApp returns a started App over groups API groups, each
// recording a full window of unexpired applied requests
// (Options.RequestsPerGroup).
func requestsBenchApp(b *testing.B, groups int) *app.App {
	b.Helper()
	ctx := context.Background()
	opts := app.DefaultOptions()
	store := memory.NewStore()
	for i := range groups {
		g := group(fmt.Sprintf("g%d", i), 0, 1_000_000, 0)
		g.Source = domain.SourceAPI
		for j := range opts.RequestsPerGroup {
			g.Applied = append(g.Applied, domain.AppliedRequest{ID: fmt.Sprintf("old-%d-%d", i, j), Fingerprint: "f", At: t0})
		}
		if _, err := store.CreateGroup(ctx, g); err != nil {
			b.Fatal(err)
		}
	}
	a := app.New(opts, app.Deps{
		Store: store, Commands: &memory.Commands{}, Clock: memory.NewClock(t0),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err := a.Start(ctx); err != nil {
		b.Fatal(err)
	}
	return a
}

// BenchmarkIncreaseWithRequestID is IncreaseSize(1) under a fresh request
// id, through App.Once, beside groups that each record a full window of
// applied requests: the at-most-once lookup runs before the group write.
func BenchmarkIncreaseWithRequestID(b *testing.B) {
	for _, n := range []int{10, 500} {
		b.Run(fmt.Sprintf("groups=%d", n), func(b *testing.B) {
			a := requestsBenchApp(b, n)
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				if i%1000 == 0 {
					// Start over: every instance added stays in its group,
					// and the cost per op must not depend on b.N.
					b.StopTimer()
					a = requestsBenchApp(b, n)
					b.StartTimer()
				}
				id := fmt.Sprintf("req-%d", i)
				g := fmt.Sprintf("g%d", i%n)
				if _, err := a.Once(ctx, id, "increase/"+g, func(ctx context.Context) (app.Revisions, error) {
					return a.IncreaseSize(ctx, g, 1)
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
