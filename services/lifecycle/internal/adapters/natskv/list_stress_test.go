package natskv_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/natskv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/protoconv"
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

// A listed key's value is decoded as it is read: an undecodable value fails
// the list naming its key, unless a later value of the key replaced it.
func TestListDecodesOnlyTheLatestValueThatCounts(t *testing.T) {
	env := natstest.Start(t)
	ctx := context.Background()
	s, err := natskv.Open(ctx, env.JS)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := env.JS.KeyValue(ctx, messaging.BucketInstances)
	if err != nil {
		t.Fatal(err)
	}
	good := domain.NewInstance("g-good", "g", time.Now())
	if _, err := s.CreateInstance(ctx, good); err != nil {
		t.Fatal(err)
	}
	key := messaging.InstanceKey("g", "g-bad")
	if _, err := kv.Put(ctx, key, []byte("\xff not a record")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ListInstances(ctx); err == nil || !strings.Contains(err.Error(), key) {
		t.Errorf("an undecodable record should fail the list naming %s: %v", key, err)
	}
	fixed := domain.NewInstance("g-bad", "g", time.Now())
	b, err := proto.Marshal(protoconv.InstanceToProto(fixed))
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(ctx, key, b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.ListInstances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Instance.ID != "g-bad" || got[0].Revision != rev || got[1].Instance.ID != "g-good" {
		t.Errorf("want both records sorted by key, the fixed one at revision %d: %+v", rev, got)
	}
}
