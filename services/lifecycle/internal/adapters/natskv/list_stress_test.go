package natskv_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/natskv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// Listing while records are updated never misses one (the watcher's
// "initial values done" marker alone would: it counts messages).
func TestListDuringUpdatesSeesEveryRecord(t *testing.T) {
	env := natstest.Start(t)
	ctx := context.Background()
	s, err := natskv.Open(ctx, env.JS)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	revs := map[string]uint64{}
	var ins []domain.Instance
	for i := range n {
		in := domain.NewInstance(fmt.Sprintf("g-%010d", i), "g", time.Now())
		rev, err := s.CreateInstance(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		revs[in.ID] = rev
		ins = append(ins, in)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			for _, in := range ins {
				select {
				case <-stop:
					return
				default:
				}
				in.Attempt++
				rev, err := s.UpdateInstance(ctx, in, revs[in.ID])
				if err != nil {
					t.Error(err)
					return
				}
				revs[in.ID] = rev
			}
		}
	}()
	for i := range 100 {
		got, err := s.ListInstances(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != n {
			t.Errorf("list %d: %d records, want %d", i, len(got), n)
			break
		}
	}
	close(stop)
	wg.Wait()
}
