package simcluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// testTimeout bounds every wait: generous, because CI machines are small and
// busy; tests poll or block on events rather than sleeping fixed amounts.
const testTimeout = 20 * time.Second

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func TestRegisterBecomesReadyAfterDelay(t *testing.T) {
	c := New(Options{ReadyDelay: 50 * time.Millisecond})
	defer c.Close()

	if err := c.Register("n1", "qcloud:///z/ins-1"); err != nil {
		t.Fatal(err)
	}
	n, ok := c.Get("n1")
	if !ok || n.Ready || n.ProviderID != "qcloud:///z/ins-1" || n.CreatedAt.IsZero() {
		t.Fatalf("fresh node = %+v, ok=%v; want NotReady with provider ID", n, ok)
	}
	n, err := c.WaitFor(ctxT(t), "n1", func(n Node) bool { return n.Ready })
	if err != nil {
		t.Fatal(err)
	}
	if !n.Ready {
		t.Fatalf("node not ready: %+v", n)
	}
}

func TestZeroDelayIsImmediatelyReady(t *testing.T) {
	c := New(Options{})
	defer c.Close()
	if err := c.Register("n1", "p1"); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Get("n1"); !n.Ready {
		t.Fatalf("want ready immediately with zero delay, got %+v", n)
	}
}

func TestSetReadyCancelsPendingReady(t *testing.T) {
	c := New(Options{ReadyDelay: 20 * time.Millisecond})
	defer c.Close()
	if err := c.Register("n1", "p1"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReady("n1", false); err != nil {
		t.Fatal(err)
	}
	// Re-registering with another node is a sync point: once its own timer
	// has fired, n1's timer (same delay, armed earlier) had its chance too.
	if err := c.Register("n2", "p2"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitFor(ctxT(t), "n2", func(n Node) bool { return n.Ready }); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Get("n1"); n.Ready {
		t.Fatal("SetReady(false) must cancel the pending automatic Ready")
	}
}

func TestUnknownNodeErrors(t *testing.T) {
	c := New(DefaultOptions())
	defer c.Close()
	for name, err := range map[string]error{
		"SetReady": c.SetReady("x", true),
		"Patch":    c.Patch("x", map[string]string{"a": "b"}, nil, nil),
		"Delete":   c.Delete("x"),
	} {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s on missing node: err = %v, want ErrNotFound", name, err)
		}
	}
	if err := c.Register("", "p"); err == nil {
		t.Error("Register with empty name must fail")
	}
}

func TestPatchMergesAndReplacesTaints(t *testing.T) {
	c := New(Options{})
	defer c.Close()
	if err := c.Register("n1", "p1"); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Patch("n1", map[string]string{"a": "1", "b": "2"}, map[string]string{"x": "y"},
		[]Taint{{Key: "k", Value: "v1", Effect: "NoSchedule"}, {Key: "k", Value: "v1", Effect: "NoExecute"}}))
	must(c.Patch("n1", map[string]string{"b": "3", "c": ""}, nil,
		[]Taint{{Key: "k", Value: "v2", Effect: "NoSchedule"}}))

	n, _ := c.Get("n1")
	wantLabels := map[string]string{"a": "1", "b": "3", "c": ""}
	if fmt.Sprint(n.Labels) != fmt.Sprint(wantLabels) {
		t.Errorf("labels = %v, want %v", n.Labels, wantLabels)
	}
	if n.Annotations["x"] != "y" {
		t.Errorf("annotations = %v", n.Annotations)
	}
	want := []Taint{{Key: "k", Value: "v2", Effect: "NoSchedule"}, {Key: "k", Value: "v1", Effect: "NoExecute"}}
	if fmt.Sprint(n.Taints) != fmt.Sprint(want) {
		t.Errorf("taints = %v, want %v", n.Taints, want)
	}

	// Returned nodes are copies.
	n.Labels["a"] = "mutated"
	if m, _ := c.Get("n1"); m.Labels["a"] != "1" {
		t.Error("Get must return a deep copy")
	}

	must(c.RemoveTaint("n1", "k", "NoExecute"))
	must(c.RemoveLabels("n1", "a", "missing"))
	n, _ = c.Get("n1")
	if len(n.Taints) != 1 || n.Taints[0].Effect != "NoSchedule" {
		t.Errorf("after RemoveTaint taints = %v", n.Taints)
	}
	if _, ok := n.Labels["a"]; ok {
		t.Errorf("after RemoveLabels labels = %v", n.Labels)
	}
}

func TestWatchInitialListThenLiveEventsInOrder(t *testing.T) {
	c := New(Options{ReadyDelay: -1}) // never auto-ready: fully deterministic events
	defer c.Close()
	for _, n := range []string{"b", "a"} {
		if err := c.Register(n, "p-"+n); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ch := c.Watch(ctx)

	// Produce many events before reading any: a slow consumer loses nothing.
	const updates = 500
	for i := range updates {
		if err := c.Patch("a", map[string]string{"i": fmt.Sprint(i)}, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.SetReady("b", true); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete("b"); err != nil {
		t.Fatal(err)
	}

	next := func() Event {
		t.Helper()
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("watch channel closed early")
			}
			return ev
		case <-ctx.Done():
			t.Fatal("timed out waiting for event")
		}
		return Event{}
	}
	if ev := next(); ev.Type != Added || ev.Node.Name != "a" {
		t.Fatalf("first event = %v %s, want ADDED a", ev.Type, ev.Node.Name)
	}
	if ev := next(); ev.Type != Added || ev.Node.Name != "b" {
		t.Fatalf("second event = %v %s, want ADDED b", ev.Type, ev.Node.Name)
	}
	for i := range updates {
		ev := next()
		if ev.Type != Modified || ev.Node.Labels["i"] != fmt.Sprint(i) {
			t.Fatalf("update %d: got %v %v", i, ev.Type, ev.Node.Labels)
		}
	}
	if ev := next(); ev.Type != Modified || ev.Node.Name != "b" || !ev.Node.Ready {
		t.Fatalf("want b Ready, got %v %+v", ev.Type, ev.Node)
	}
	if ev := next(); ev.Type != Deleted || ev.Node.Name != "b" {
		t.Fatalf("want DELETED b, got %v %s", ev.Type, ev.Node.Name)
	}

	cancel()
	for range ch { // must be closed after ctx ends
	}
}

func TestPatchWithoutChangeEmitsNothing(t *testing.T) {
	c := New(Options{ReadyDelay: -1})
	defer c.Close()
	if err := c.Register("a", "p"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ch := c.Watch(ctx)
	<-ch // initial ADDED
	if err := c.Patch("a", map[string]string{}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReady("a", false); err != nil { // already NotReady
		t.Fatal(err)
	}
	if err := c.Patch("a", map[string]string{"marker": "1"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if ev := <-ch; ev.Node.Labels["marker"] != "1" {
		t.Fatalf("no-op changes must not emit events; got %v %+v", ev.Type, ev.Node)
	}
}

func TestMarkNotReadyIfProvider(t *testing.T) {
	c := New(Options{})
	defer c.Close()
	if err := c.Register("n", "p-new"); err != nil {
		t.Fatal(err)
	}
	if c.MarkNotReadyIfProvider("n", "p-old") {
		t.Fatal("must not touch a node re-registered by another machine")
	}
	if n, _ := c.Get("n"); !n.Ready {
		t.Fatal("node must still be Ready")
	}
	if !c.MarkNotReadyIfProvider("n", "p-new") {
		t.Fatal("matching provider must mark NotReady")
	}
	if n, _ := c.Get("n"); n.Ready {
		t.Fatal("node must be NotReady")
	}
}

func TestCloseEndsWatchesWithUnreadEvents(t *testing.T) {
	c := New(Options{})
	ch := c.Watch(context.Background())
	for i := range 10 {
		if err := c.Register(fmt.Sprint("n", i), "p"); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatal("Close hung with an unread watch")
	}
	for range ch { // closed, possibly after some buffered events
	}
	if err := c.Register("late", "p"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Register after Close: %v", err)
	}
}

func TestConcurrentUse(t *testing.T) {
	c := New(Options{ReadyDelay: time.Millisecond})
	defer c.Close()
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ch := c.Watch(ctx)

	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 50 {
				name := fmt.Sprintf("n-%d-%d", w, i)
				_ = c.Register(name, "p")
				_ = c.Patch(name, map[string]string{"w": fmt.Sprint(w)}, nil, []Taint{{Key: "t", Effect: "NoSchedule"}})
				_ = c.SetReady(name, i%2 == 0)
				_ = c.List()
				if i%3 == 0 {
					_ = c.Delete(name)
				}
			}
		})
	}
	wg.Wait()

	// Replaying the stream must reproduce the final state.
	want := c.List()
	seen := map[string]Node{}
	deadline := time.After(testTimeout)
	for len(seen) != len(want) || !sameNodes(seen, want) {
		select {
		case ev := <-ch:
			if ev.Type == Deleted {
				delete(seen, ev.Node.Name)
			} else {
				seen[ev.Node.Name] = ev.Node
			}
		case <-deadline:
			t.Fatalf("stream did not converge: %d nodes seen, %d want", len(seen), len(want))
		}
	}
}

func sameNodes(seen map[string]Node, want []Node) bool {
	for _, n := range want {
		s, ok := seen[n.Name]
		if !ok || s.Ready != n.Ready || fmt.Sprint(s.Labels) != fmt.Sprint(n.Labels) {
			return false
		}
	}
	return true
}
