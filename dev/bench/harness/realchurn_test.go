package harness

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/messaging"
)

// TestChurnLeavesTheStoreBoundedByLiveData runs a few hundred real
// create/delete cycles through the services (gateway gRPC IncreaseSize and
// DeleteNodes as CA makes them, lifecycle, cloud adapter, the emulator),
// then removes every instance: once the Deleted records' retention and
// the purge markers' TTL have passed (1 s each here, standing for 15 days
// and 30 minutes long past), the instances bucket must hold nothing, as
// on an empty store, and the other buckets no more than before the
// churn. It fails if Deleted records were kept past the retention (the
// purge falling behind) or markers stayed in the bucket.
func TestChurnLeavesTheStoreBoundedByLiveData(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the four services")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	groups := []string{"churn-a", "churn-b"}
	const live, batch, rounds = 5, 5, 30 // 300 cycles
	cs, err := StartChurnStack(ctx, ChurnStackConfig{Dir: t.TempDir(), Groups: groups, MaxSize: live + batch,
		Retention: time.Second, MarkerTTL: time.Second, RequestTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	empty, err := StreamBytes(ctx, cs.JS)
	if err != nil {
		t.Fatal(err)
	}
	ch := cs.Churn(groups, live, batch, time.Minute)
	if err := ch.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cycles := 0
	for range rounds {
		n, err := ch.Round(ctx)
		if err != nil {
			t.Fatalf("after %d cycles: %v", cycles, err)
		}
		cycles += n
	}
	if err := ch.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	created := cycles + len(groups)*live
	lc := cs.Stack.Registries["lifecycle"]
	purged := func(n int) {
		t.Helper()
		waitFor(t, ctx, time.Minute, func() (bool, string) {
			kept, purged, err := DeletedKept(lc)
			if err != nil {
				t.Fatal(err)
			}
			return kept == 0 && purged == n, "Deleted records kept " + itoa(kept) + ", purged " + itoa(purged) + " of " + itoa(n)
		})
	}
	// Every Deleted record is purged once past the retention.
	purged(created)
	// A group record keeps the requests applied to it for the request TTL
	// (at most 100): one more instance per group, past the TTL, leaves
	// the last requests only.
	ch.Live = 1
	if err := ch.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ch.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	purged(created + len(groups))
	// Every purge marker expires: the bucket holds nothing.
	if err := WaitMessages(ctx, cs.JS, messaging.BucketInstances, 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	after, err := StreamBytes(ctx, cs.JS)
	if err != nil {
		t.Fatal(err)
	}
	inst := "KV_" + messaging.BucketInstances
	if after[inst] != 0 {
		t.Errorf("instances bucket holds %d bytes after %d cycles and every instance removed, want 0", after[inst], cycles)
	}
	// The other buckets: the catalog as before, each group's record with
	// its last two requests (the IncreaseSize and DeleteNodes of one
	// instance, a few hundred bytes) beside its definition.
	for name, b := range after {
		if name == inst || name == messaging.EventStream || name == messaging.CommandStream {
			continue
		}
		if b > empty[name]+uint64(len(groups))*512 {
			t.Errorf("%s holds %d bytes after %d cycles, %d before", name, b, cycles, empty[name])
		}
	}
	shape, err := ReadRecordShape(ctx, cs.JS)
	if err != nil {
		t.Fatal(err)
	}
	if shape.Records != 0 {
		t.Errorf("%d instance records left, want none", shape.Records)
	}
	// Results are kept for the event retention (72 h), by time, not by
	// live data: logged for the record, not bounded here.
	t.Logf("%d cycles: events stream %d bytes (%.0f per cycle), commands stream %d bytes", cycles, after[messaging.EventStream],
		float64(after[messaging.EventStream])/float64(created), after[messaging.CommandStream])
}

func waitFor(t *testing.T, ctx context.Context, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, detail)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
