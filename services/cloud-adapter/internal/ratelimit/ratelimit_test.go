package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ratelimit"
)

func TestParseAndString(t *testing.T) {
	ls, err := ratelimit.Parse(" RunInstances=8:2, DescribeInstances=16.5 ,")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ls.String(), "DescribeInstances=16.5:1,RunInstances=8:2"; got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
	again, err := ratelimit.Parse(ls.String())
	if err != nil || again.String() != ls.String() {
		t.Fatalf("round trip = %v, %v", again, err)
	}
	for _, bad := range []string{"RunInstances", "=5", "RunInstances=0", "RunInstances=-1", "RunInstances=x", "RunInstances=5:0", "RunInstances=5:x"} {
		if _, err := ratelimit.Parse(bad); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

func TestLimitersArePerAccountRegionAndAction(t *testing.T) {
	l := ratelimit.New(ratelimit.Limits{"Run": {Rate: 0.001, Burst: 1}})
	// A context too short for the next token makes Wait fail at once
	// instead of sleeping: a spent bucket is observable without timing.
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	for _, k := range [][3]string{{"a", "r1", "Run"}, {"b", "r1", "Run"}, {"a", "r2", "Run"}} {
		if _, err := l.Wait(short(), k[0], k[1], k[2]); err != nil {
			t.Fatalf("first call for %v waited: %v", k, err)
		}
	}
	if _, err := l.Wait(short(), "a", "r1", "Run"); err == nil {
		t.Fatal("second call for the same key got a token: the burst is 1")
	}
	for range 100 {
		if _, err := l.Wait(short(), "a", "r1", "Unlimited"); err != nil {
			t.Fatalf("an action without a limit waited: %v", err)
		}
	}
}
