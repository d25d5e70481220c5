package natskv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/natskv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// BenchmarkListInstancesAfterScaleDown lists 1,000 live records in a
// bucket that also holds the purge markers of 5,000 records removed
// within the marker TTL (a leader starting soon after a large
// scale-down). A listing that fetched each marker's key again would make
// 5,000 extra round trips; the markers the watch already delivered say
// the keys are gone.
func BenchmarkListInstancesAfterScaleDown(b *testing.B) {
	const live, removed = 1000, 5000
	env := natstest.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := messaging.Ensure(ctx, env.JS, messaging.DefaultOptions()); err != nil {
		b.Fatal(err)
	}
	s, err := natskv.Open(ctx, env.JS)
	if err != nil {
		b.Fatal(err)
	}
	for i := range live + removed {
		in := domain.Instance{ID: fmt.Sprintf("ins-%05d", i), Group: "churn", State: domain.StateRunning}
		rev, err := s.CreateInstance(ctx, in)
		if err != nil {
			b.Fatal(err)
		}
		if i >= live {
			if _, err := s.DeleteInstance(ctx, in.Group, in.ID, rev); err != nil {
				b.Fatal(err)
			}
		}
	}
	kv, err := env.JS.KeyValue(ctx, messaging.BucketInstances)
	if err != nil {
		b.Fatal(err)
	}
	if st, err := kv.Status(ctx); err != nil || st.Values() != live+removed {
		b.Fatalf("bucket holds %v messages (%v), want %d values and markers", st.Values(), err, live+removed)
	}
	b.ResetTimer()
	for b.Loop() {
		got, err := s.ListInstances(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != live {
			b.Fatalf("listed %d, want %d", len(got), live)
		}
	}
}

// A listing while removed records' markers are still in the bucket gives
// the live records only, the removed ones neither listed nor an error.
func TestListInstancesWithRemovalMarkers(t *testing.T) {
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := messaging.Ensure(ctx, env.JS, messaging.DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	s, err := natskv.Open(ctx, env.JS)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		in := domain.Instance{ID: fmt.Sprintf("ins-%d", i), Group: "g", State: domain.StateRunning}
		rev, err := s.CreateInstance(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			if _, err := s.DeleteInstance(ctx, in.Group, in.ID, rev); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := s.ListInstances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, v := range got {
		ids = append(ids, v.Instance.ID)
	}
	if fmt.Sprint(ids) != "[ins-0 ins-2 ins-4]" {
		t.Errorf("listed %v, want [ins-0 ins-2 ins-4]", ids)
	}
}
