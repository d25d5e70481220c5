package app_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/fake"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/app"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// countingCloud counts the InstanceShapes calls reaching the cloud.
type countingCloud struct {
	*fake.Cloud
	mu    sync.Mutex
	calls int
}

func (c *countingCloud) InstanceShapes(ctx context.Context, t ports.Target, zones, types []string) ([]domain.InstanceShape, error) {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	return c.Cloud.InstanceShapes(ctx, t, zones, types)
}

func (c *countingCloud) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// noShapes is a cloud whose adapter cannot tell shapes at all.
type noShapes struct{ ports.Cloud }

func TestShapesCache(t *testing.T) {
	cloud := &countingCloud{Cloud: fake.NewCloud()}
	cloud.SetShapes(
		domain.InstanceShape{Zone: "z1", InstanceType: "A", VCPU: 2, MemoryMiB: 4096, Arch: domain.ArchAMD64},
		domain.InstanceShape{Zone: "z2", InstanceType: "A", VCPU: 2, MemoryMiB: 4096, Arch: domain.ArchAMD64},
	)
	now := time.Unix(1000, 0)
	s := app.NewShapes(map[string]ports.Cloud{"c": cloud, "x": noShapes{fake.NewCloud()}}, app.ShapeOptions{TTL: time.Minute, Limit: 4, Now: func() time.Time { return now }})
	ctx := context.Background()
	tgt := domain.Target{Provider: "c", Account: "a", Region: "r"}
	ask := func(zones, types []string) []domain.InstanceShape {
		t.Helper()
		got, _, err := s.Shapes(ctx, tgt, zones, types)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	if got := ask([]string{"z1", "z3"}, []string{"A", "B"}); len(got) != 1 || got[0].Zone != "z1" || cloud.n() != 1 {
		t.Fatalf("first answer %v after %d calls", got, cloud.n())
	}
	// Offered and not offered pairs both come from the cache.
	if got, cached, err := s.Shapes(ctx, tgt, []string{"z3", "z1"}, []string{"B", "A", "A"}); err != nil || !cached || len(got) != 1 || cloud.n() != 1 {
		t.Fatalf("cached answer %v (cached %v, %v) after %d calls", got, cached, err, cloud.n())
	}
	// Another account is another question.
	if _, cached, err := s.Shapes(ctx, domain.Target{Provider: "c", Account: "b", Region: "r"}, []string{"z1"}, []string{"A"}); err != nil || cached || cloud.n() != 2 {
		t.Fatalf("other account: %v after %d calls", err, cloud.n())
	}
	if n := s.CachedShapes(); n > 4 {
		t.Errorf("%d cached entries, limit 4", n)
	}
	// After the TTL the cloud is asked again.
	now = now.Add(time.Minute)
	if got := ask([]string{"z1"}, []string{"A"}); len(got) != 1 || cloud.n() != 3 {
		t.Fatalf("after the TTL: %v after %d calls", got, cloud.n())
	}
	// A failed call caches nothing.
	cloud.FailNext(fake.OpShapes, ports.NewThrottledError("RequestLimitExceeded", "slow down"))
	if _, _, err := s.Shapes(ctx, tgt, []string{"z2"}, []string{"A"}); ports.KindOf(err) != ports.ErrorKindThrottled {
		t.Fatalf("throttled: %v", err)
	}
	if got := ask([]string{"z2"}, []string{"A"}); len(got) != 1 || cloud.n() != 5 {
		t.Fatalf("after a failure: %v after %d calls", got, cloud.n())
	}
	if n := s.CachedShapes(); n > 4 {
		t.Errorf("%d cached entries, limit 4", n)
	}

	for _, p := range []string{"x", "nope"} {
		if _, _, err := s.Shapes(ctx, domain.Target{Provider: p}, []string{"z1"}, []string{"A"}); !errors.Is(err, ports.ErrNotSupported) {
			t.Errorf("provider %s: %v, want ErrNotSupported", p, err)
		}
	}
	if _, _, err := s.Shapes(ctx, tgt, nil, []string{"A"}); ports.KindOf(err) != ports.ErrorKindInvalidParameters {
		t.Errorf("no zone: %v", err)
	}
}
