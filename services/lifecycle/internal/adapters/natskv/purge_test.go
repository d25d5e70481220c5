package natskv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/natskv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// Removed instance records leave nothing in the bucket's stream once the
// marker TTL has passed, so the bucket does not grow with all-time churn
// (a plain Delete leaves a marker per instance forever), and a watcher
// (the gateway's read model) still sees every removal as it happens.
func TestDeletedInstancesDoNotAccumulateInTheBucket(t *testing.T) {
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := messaging.DefaultOptions()
	o.KVMarkerTTL = time.Second // the shortest JetStream takes
	if err := messaging.Ensure(ctx, env.JS, o); err != nil {
		t.Fatal(err)
	}
	s, err := natskv.Open(ctx, env.JS)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := env.JS.KeyValue(ctx, messaging.BucketInstances)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()

	const n = 50
	for i := range n {
		in := domain.Instance{ID: fmt.Sprintf("ins-%03d", i), Group: "churn", State: domain.StateDeleted}
		rev, err := s.CreateInstance(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.DeleteInstance(ctx, in.Group, in.ID, rev); err != nil {
			t.Fatal(err)
		}
	}
	// A live record is kept: only removed ones go.
	if _, err := s.CreateInstance(ctx, domain.Instance{ID: "ins-live", Group: "churn", State: domain.StatePending}); err != nil {
		t.Fatal(err)
	}

	removed := map[string]bool{}
	for len(removed) < n {
		select {
		case e := <-w.Updates():
			if e != nil && (e.Operation() == jetstream.KeyValueDelete || e.Operation() == jetstream.KeyValuePurge) {
				removed[e.Key()] = true
			}
		case <-ctx.Done():
			t.Fatalf("the watcher saw %d of %d removals", len(removed), n)
		}
	}

	stream, err := env.JS.Stream(ctx, "KV_"+messaging.BucketInstances)
	if err != nil {
		t.Fatal(err)
	}
	held := func() (uint64, map[string]uint64) {
		t.Helper()
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter("$KV."+messaging.BucketInstances+".>"))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs, info.State.Subjects
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		msgs, subjects := held()
		if msgs == 1 && subjects["$KV."+messaging.BucketInstances+".churn.ins-live"] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the marker TTL the bucket still holds %d messages on %d keys, want only the live record's", msgs, len(subjects))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := s.GetInstance(ctx, "churn", "ins-000"); err == nil {
		t.Error("a removed record can still be read")
	}
	list, err := s.ListInstances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Instance.ID != "ins-live" {
		t.Errorf("listed %d records, want only ins-live", len(list))
	}
}
