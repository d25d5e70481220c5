// Package clustertest is the contract every ports.Cluster implementation
// must meet. The in-memory fake and the Kubernetes adapter (on a real
// kube-apiserver) both run it, so the fake the app's tests use cannot
// drift from the cluster lifecycle runs against.
package clustertest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// Harness is one implementation under test, on a cluster without Nodes.
type Harness struct {
	Cluster ports.Cluster
	// Put creates a Node or replaces it whole, as kubelet and the other
	// writers of a cluster would (behind the adapter's back). It never
	// changes the ProviderID of an existing Node (Kubernetes refuses it).
	Put func(t *testing.T, n ports.Node)
	// Get reads a Node as stored.
	Get func(t *testing.T, name string) (ports.Node, bool)
	// Remove deletes a Node behind the adapter's back.
	Remove func(t *testing.T, name string)
	// OmitsSynced says Watch never delivers NodesSynced (allowed by the
	// port for an implementation that cannot tell when its list is done).
	OmitsSynced bool
}

// wait bounds every wait for an event (a loaded two-core CI machine).
const wait = 30 * time.Second

// Run runs the contract against clusters made by newHarness (each subtest
// gets a fresh one, without Nodes).
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Run("watch delivers the existing nodes, then synced, then every change in order", func(t *testing.T) {
		h := newHarness(t)
		a := Node("a", true)
		b := Node("b", false)
		b.Taints, b.InternalIP, b.Annotations = nil, "", nil
		h.Put(t, a)
		h.Put(t, b)
		w := startWatch(t, h)
		w.waitInitial(t, h, a, b)

		b.Ready = true
		h.Put(t, b)
		iReady := w.waitFor(t, "b Ready", func(ev ports.NodeEvent) bool {
			return ev.Type == ports.NodeUpdated && Equal(ev.Node, b)
		})
		h.Remove(t, "a")
		iDel := w.waitFor(t, "a Deleted", func(ev ports.NodeEvent) bool { return ev.Type == ports.NodeDeleted && ev.Node.Name == "a" })
		if ev := w.at(iDel); !Equal(ev.Node, a) {
			t.Errorf("NodeDeleted carries %+v, want the Node's last state %+v", ev.Node, a)
		}
		c := Node("c", true)
		h.Put(t, c)
		iAdd := w.waitFor(t, "c Added", func(ev ports.NodeEvent) bool { return ev.Type == ports.NodeAdded && ev.Node.Name == "c" })
		if iReady >= iDel || iDel >= iAdd {
			t.Errorf("changes delivered out of order: b Ready at %d, a Deleted at %d, c Added at %d", iReady, iDel, iAdd)
		}
		w.waitFor(t, "c as put", func(ev ports.NodeEvent) bool { return ev.Node.Name == "c" && Equal(ev.Node, c) })
		for i, ev := range w.events() {
			if ev.Type == ports.NodesSynced && i != 2 {
				t.Errorf("NodesSynced again at %d", i)
			}
		}
		if err := w.stop(t); err != nil {
			t.Errorf("Watch returned %v after its context ended, want nil or context.Canceled", err)
		}
	})

	t.Run("watch of an empty cluster delivers synced and then the first node", func(t *testing.T) {
		h := newHarness(t)
		w := startWatch(t, h)
		w.waitInitial(t, h)
		n := Node("first", true)
		h.Put(t, n)
		i := w.waitFor(t, "first Added", func(ev ports.NodeEvent) bool { return ev.Node.Name == "first" })
		if ev := w.at(i); ev.Type != ports.NodeAdded {
			t.Errorf("the first event of a new Node is %s, want Added", ev.Type)
		}
	})

	t.Run("fn is never called concurrently and watch returns when its context ends", func(t *testing.T) {
		h := newHarness(t)
		var inFlight, overlaps atomic.Int32
		w := startWatchFn(t, h, func(ports.NodeEvent) {
			if inFlight.Add(1) > 1 {
				overlaps.Add(1)
			}
			time.Sleep(time.Millisecond) // widen the window an overlap needs
			inFlight.Add(-1)
		})
		w.waitInitial(t, h)
		const n = 12
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { h.Put(t, Node(fmt.Sprintf("p%02d", i), i%2 == 0)) })
		}
		wg.Wait()
		for i := range n {
			name := fmt.Sprintf("p%02d", i)
			w.waitFor(t, name, func(ev ports.NodeEvent) bool { return ev.Node.Name == name })
		}
		if err := w.stop(t); err != nil {
			t.Errorf("Watch returned %v after its context ended", err)
		}
		if o := overlaps.Load(); o > 0 {
			t.Errorf("fn was called concurrently %d times", o)
		}
	})

	t.Run("a new watch delivers the current nodes again and watches run side by side", func(t *testing.T) {
		h := newHarness(t)
		a := Node("a", true)
		h.Put(t, a)
		w1 := startWatch(t, h)
		w1.waitInitial(t, h, a)
		b := Node("b", false)
		h.Put(t, b)
		w1.waitFor(t, "b", func(ev ports.NodeEvent) bool { return Equal(ev.Node, b) })

		w2 := startWatch(t, h)
		w2.waitInitial(t, h, a, b)
		a.Labels["second"] = "change"
		h.Put(t, a)
		for _, w := range []*watch{w1, w2} {
			w.waitFor(t, "a changed", func(ev ports.NodeEvent) bool { return ev.Type == ports.NodeUpdated && Equal(ev.Node, a) })
		}
		if err := w1.stop(t); err != nil {
			t.Errorf("first Watch returned %v", err)
		}
		b.Ready = true
		h.Put(t, b)
		w2.waitFor(t, "b Ready after the first watch ended", func(ev ports.NodeEvent) bool { return Equal(ev.Node, b) })
	})

	t.Run("patch merges labels and annotations and keeps the others", func(t *testing.T) {
		h := newHarness(t)
		n := Node("n", true)
		n.Labels = map[string]string{"keep": "1", "over": "old"}
		n.Annotations = map[string]string{"note": "theirs"}
		h.Put(t, n)
		w := startWatch(t, h)
		w.waitInitial(t, h, n)
		ctx := context.Background()
		if err := h.Cluster.PatchNode(ctx, "n", map[string]string{"over": "new", "add": "x"}, map[string]string{"nodesmith.io/a": "b"}, nil); err != nil {
			t.Fatalf("PatchNode: %v", err)
		}
		want := clone(n)
		want.Labels = map[string]string{"keep": "1", "over": "new", "add": "x"}
		want.Annotations = map[string]string{"note": "theirs", "nodesmith.io/a": "b"}
		got := mustGet(t, h, "n")
		if !Equal(got, want) {
			t.Errorf("after PatchNode:\n got %+v\nwant %+v", got, want)
		}
		w.waitFor(t, "the patch", func(ev ports.NodeEvent) bool { return ev.Type == ports.NodeUpdated && Equal(ev.Node, want) })

		// Only labels, only annotations.
		if err := h.Cluster.PatchNode(ctx, "n", map[string]string{"only": "labels"}, nil, nil); err != nil {
			t.Fatal(err)
		}
		if err := h.Cluster.PatchNode(ctx, "n", nil, map[string]string{"only": "annotations"}, nil); err != nil {
			t.Fatal(err)
		}
		want.Labels["only"], want.Annotations["only"] = "labels", "annotations"
		if got := mustGet(t, h, "n"); !Equal(got, want) {
			t.Errorf("after two more patches:\n got %+v\nwant %+v", got, want)
		}
	})

	t.Run("patch adds the missing taints by key and effect and never changes or repeats one", func(t *testing.T) {
		h := newHarness(t)
		n := Node("n", true)
		n.Taints = []ports.Taint{{Key: "k1", Value: "v1", Effect: "NoSchedule"}}
		h.Put(t, n)
		add := []ports.Taint{
			{Key: "k1", Value: "v2", Effect: "NoSchedule"}, // present by key and effect: kept as it is
			{Key: "k1", Effect: "NoExecute"},               // same key, other effect: added
			{Key: "k2", Value: "v", Effect: "PreferNoSchedule"},
		}
		ctx := context.Background()
		for i := range 2 { // the second patch changes nothing
			if err := h.Cluster.PatchNode(ctx, "n", nil, nil, add); err != nil {
				t.Fatalf("PatchNode #%d: %v", i+1, err)
			}
			want := []ports.Taint{n.Taints[0], add[1], add[2]}
			if got := mustGet(t, h, "n").Taints; !slices.Equal(got, want) {
				t.Errorf("taints after patch #%d = %+v, want %+v", i+1, got, want)
			}
		}
	})

	t.Run("a patch that changes nothing is no change to watch", func(t *testing.T) {
		h := newHarness(t)
		n := Node("n", true)
		h.Put(t, n)
		w := startWatch(t, h)
		w.waitInitial(t, h, n)
		before := len(w.events())
		ctx := context.Background()
		if err := h.Cluster.PatchNode(ctx, "n", n.Labels, n.Annotations, n.Taints); err != nil {
			t.Fatalf("PatchNode with what the Node has: %v", err)
		}
		n.Labels["marker"] = "1"
		h.Put(t, n)
		i := w.waitFor(t, "the marker", func(ev ports.NodeEvent) bool { return ev.Node.Labels["marker"] == "1" })
		if i != before {
			t.Errorf("a patch that changed nothing was delivered: %+v", w.events()[before:i])
		}
	})

	t.Run("concurrent patches of one node all land", func(t *testing.T) {
		h := newHarness(t)
		h.Put(t, Node("n", true))
		const writers = 8
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for i := range writers {
			wg.Go(func() {
				k := fmt.Sprintf("w%d", i)
				errs <- h.Cluster.PatchNode(context.Background(), "n",
					map[string]string{k: "l"}, map[string]string{k: "a"}, []ports.Taint{{Key: k, Effect: "NoSchedule"}})
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("concurrent PatchNode: %v", err)
			}
		}
		got := mustGet(t, h, "n")
		for i := range writers {
			k := fmt.Sprintf("w%d", i)
			if got.Labels[k] != "l" || got.Annotations[k] != "a" || !slices.ContainsFunc(got.Taints, func(x ports.Taint) bool { return x.Key == k }) {
				t.Errorf("writer %s's patch was lost: %+v", k, got)
			}
		}
		if len(got.Taints) != writers+1 {
			t.Errorf("%d taints, want %d: %+v", len(got.Taints), writers+1, got.Taints)
		}
	})

	t.Run("patch of a missing node is an error and creates nothing", func(t *testing.T) {
		h := newHarness(t)
		ctx := context.Background()
		cases := map[string]func() error{
			"labels": func() error { return h.Cluster.PatchNode(ctx, "missing", map[string]string{"a": "b"}, nil, nil) },
			"taints": func() error {
				return h.Cluster.PatchNode(ctx, "missing", nil, nil, []ports.Taint{{Key: "k", Effect: "NoSchedule"}})
			},
			"nothing": func() error { return h.Cluster.PatchNode(ctx, "missing", nil, nil, nil) },
		}
		for _, name := range slices.Sorted(maps.Keys(cases)) {
			if err := cases[name](); err == nil {
				t.Errorf("PatchNode of a missing Node with %s = nil, want an error", name)
			}
		}
		if _, ok := h.Get(t, "missing"); ok {
			t.Error("PatchNode created the missing Node")
		}
	})

	t.Run("delete removes the node and reports its last state once; a missing node is success", func(t *testing.T) {
		h := newHarness(t)
		n := Node("n", true)
		h.Put(t, n)
		w := startWatch(t, h)
		w.waitInitial(t, h, n)
		ctx := context.Background()
		if err := h.Cluster.PatchNode(ctx, "n", map[string]string{"last": "state"}, nil, nil); err != nil {
			t.Fatal(err)
		}
		n.Labels["last"] = "state"
		w.waitFor(t, "the patch", func(ev ports.NodeEvent) bool { return Equal(ev.Node, n) })
		if err := h.Cluster.DeleteNode(ctx, "n"); err != nil {
			t.Fatalf("DeleteNode: %v", err)
		}
		if _, ok := h.Get(t, "n"); ok {
			t.Error("the Node is still there after DeleteNode")
		}
		i := w.waitFor(t, "n Deleted", func(ev ports.NodeEvent) bool { return ev.Type == ports.NodeDeleted })
		if ev := w.at(i); !Equal(ev.Node, n) {
			t.Errorf("NodeDeleted carries %+v, want the last state %+v", ev.Node, n)
		}
		if err := h.Cluster.DeleteNode(ctx, "n"); err != nil {
			t.Errorf("DeleteNode of a deleted Node: %v", err)
		}
		if err := h.Cluster.DeleteNode(ctx, "never-was"); err != nil {
			t.Errorf("DeleteNode of a Node that never was: %v", err)
		}
		// A marker proves no second Deleted came before it.
		h.Put(t, Node("marker", true))
		j := w.waitFor(t, "the marker", func(ev ports.NodeEvent) bool { return ev.Node.Name == "marker" })
		for _, ev := range w.events()[i+1 : j] {
			t.Errorf("unexpected event after the delete: %s %s", ev.Type, ev.Node.Name)
		}
	})
}

// Node returns a Node with every field set.
func Node(name string, ready bool) ports.Node {
	return ports.Node{
		Name:        name,
		ProviderID:  "test://" + name,
		Ready:       ready,
		Labels:      map[string]string{"kubernetes.io/hostname": name},
		Annotations: map[string]string{"example.com/note": name},
		Taints:      []ports.Taint{{Key: "example.com/t", Value: "v", Effect: "NoSchedule"}},
		InternalIP:  "10.0.0.9",
	}
}

func clone(n ports.Node) ports.Node {
	n.Labels = maps.Clone(n.Labels)
	n.Annotations = maps.Clone(n.Annotations)
	n.Taints = slices.Clone(n.Taints)
	return n
}

// Equal compares Nodes, an empty map or list equal to none.
func Equal(a, b ports.Node) bool {
	return a.Name == b.Name && a.ProviderID == b.ProviderID && a.Ready == b.Ready && a.InternalIP == b.InternalIP &&
		maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations) && slices.Equal(a.Taints, b.Taints)
}

func mustGet(t *testing.T, h Harness, name string) ports.Node {
	t.Helper()
	n, ok := h.Get(t, name)
	if !ok {
		t.Fatalf("Node %s is missing", name)
	}
	return n
}

// watch records the events of one Watch.
type watch struct {
	mu     sync.Mutex
	evs    []ports.NodeEvent
	cancel context.CancelFunc
	done   chan error
}

func startWatch(t *testing.T, h Harness) *watch { return startWatchFn(t, h, nil) }

func startWatchFn(t *testing.T, h Harness, also func(ports.NodeEvent)) *watch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watch{cancel: cancel, done: make(chan error, 1)}
	go func() {
		w.done <- h.Cluster.Watch(ctx, func(ev ports.NodeEvent) {
			if also != nil {
				also(ev)
			}
			w.mu.Lock()
			w.evs = append(w.evs, ev)
			w.mu.Unlock()
		})
	}()
	t.Cleanup(func() { _ = w.stop(t) })
	return w
}

// stop ends the watch and returns what Watch returned, treating
// context.Canceled as nil (both are what the port allows).
func (w *watch) stop(t *testing.T) error {
	w.cancel()
	select {
	case err, ok := <-w.done:
		if !ok {
			return nil
		}
		close(w.done)
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	case <-time.After(wait):
		t.Errorf("Watch did not return within %s of its context ending", wait)
		return nil
	}
}

func (w *watch) events() []ports.NodeEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.evs)
}

func (w *watch) at(i int) ports.NodeEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.evs[i]
}

// waitFor returns the index of the first event matching ok.
func (w *watch) waitFor(t *testing.T, what string, ok func(ports.NodeEvent) bool) int {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		for i, ev := range w.events() {
			if ok(ev) {
				return i
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no event for %s within %s; got %+v", what, wait, w.events())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitInitial waits for the initial list (want, as NodeAdded in any order)
// and NodesSynced right after it, unless the implementation omits it.
func (w *watch) waitInitial(t *testing.T, h Harness, want ...ports.Node) {
	t.Helper()
	n := len(want)
	if !h.OmitsSynced {
		n++
	}
	deadline := time.Now().Add(wait)
	for len(w.events()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("initial list incomplete within %s: %+v", wait, w.events())
		}
		time.Sleep(5 * time.Millisecond)
	}
	evs := w.events()
	got := map[string]ports.Node{}
	for _, ev := range evs[:len(want)] {
		if ev.Type != ports.NodeAdded {
			t.Errorf("initial event %s %s, want Added", ev.Type, ev.Node.Name)
		}
		got[ev.Node.Name] = ev.Node
	}
	for _, n := range want {
		if !Equal(got[n.Name], n) {
			t.Errorf("initial Node %s delivered as %+v, want %+v", n.Name, got[n.Name], n)
		}
	}
	if !h.OmitsSynced && evs[len(want)].Type != ports.NodesSynced {
		t.Errorf("event after the initial list is %s %s, want Synced", evs[len(want)].Type, evs[len(want)].Node.Name)
	}
	for _, ev := range evs {
		if h.OmitsSynced && ev.Type == ports.NodesSynced {
			t.Error("NodesSynced from an implementation said to omit it")
		}
	}
}
