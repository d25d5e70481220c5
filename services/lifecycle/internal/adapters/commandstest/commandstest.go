// Package commandstest is the contract every ports.Commands implementation
// must meet. The in-memory fake and the JetStream adapter (on a real
// server with nodesmith's accounts and topology) both run it, so the fake
// the app's tests use cannot drift from the command stream.
package commandstest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// Stored is one command as the queue holds it, reduced to what tells
// commands apart.
type Stored struct {
	// Kind is create, watch, terminate, hook, inventory or tag.
	Kind string
	// Key is the batch id (create), the instance id (hook), the sorted
	// instance ids joined by commas (watch, terminate) or the request id.
	Key string
	// Attempt is the attempt of a create or a hook (0 for the others).
	Attempt uint32
	// Mark is a field the suite varies between two publications of one
	// identity: ClientToken (create), Script (hook), Target.Region
	// (watch) and ClusterID (terminate, inventory, tag).
	Mark string
}

func (s Stored) String() string {
	return fmt.Sprintf("%s %s #%d (%s)", s.Kind, s.Key, s.Attempt, s.Mark)
}

// Harness is one implementation under test, with an empty queue and no
// limit.
type Harness struct {
	Commands ports.Commands
	// Queued lists the commands the queue holds, oldest first.
	Queued func(t *testing.T) []Stored
	// Limit makes the queue hold at most n commands from now on.
	Limit func(t *testing.T, n int)
	// Drain plays the workers: it takes every queued command and
	// acknowledges it.
	Drain func(t *testing.T)
}

// prefixes keeps the identities of one run's subtests apart, for an
// implementation whose deduplication window outlives a subtest.
var prefixes atomic.Int64

// Run runs the contract against implementations made by newHarness (each
// subtest gets a fresh one).
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Run("a published command is stored, each kind once per identity", func(t *testing.T) {
		h, p := newHarness(t), prefix()
		ctx := context.Background()
		cmds := sample(p, 1, "first")
		for _, c := range cmds {
			mustPublish(t, h, c)
		}
		want := stored(cmds)
		assertQueued(t, h, want)
		// Again, with other content: the identity decides, the first
		// publication stays.
		for _, c := range sample(p, 1, "second") {
			if err := publish(ctx, h.Commands, c); err != nil {
				t.Fatalf("republishing %T: %v", c, err)
			}
		}
		assertQueued(t, h, want)
	})

	t.Run("a new attempt or another set of instances is another command", func(t *testing.T) {
		h, p := newHarness(t), prefix()
		for _, c := range sample(p, 1, "a1") {
			mustPublish(t, h, c)
		}
		next := sample(p, 2, "a2")
		for _, c := range next {
			mustPublish(t, h, c)
		}
		want := append(stored(sample(p, 1, "a1")), stored(next)...)
		// Inventory and tag are identified by their request alone, which
		// sample keeps across attempts: they are not stored again.
		want = slices.DeleteFunc(want, func(s Stored) bool {
			return (s.Kind == "inventory" || s.Kind == "tag") && s.Mark == "a2"
		})
		assertQueued(t, h, want)

		// A watch or terminate of the same instances in another order is
		// the same command; with another cloud id it is not.
		w := ports.WatchCommand{Target: ports.Target{Provider: "p", Account: "a", Region: "perm"}, Instances: []ports.InstanceRef{
			{InstanceID: p + "-y", Attempt: 1, CloudID: "vm-y"}, {InstanceID: p + "-x", Attempt: 1, CloudID: "vm-x"},
		}}
		mustPublish(t, h, w)
		w.Instances[0], w.Instances[1] = w.Instances[1], w.Instances[0]
		mustPublish(t, h, w)
		w.Instances[0].CloudID = "vm-other"
		mustPublish(t, h, w)
		want = append(want, Stored{Kind: "watch", Key: p + "-x," + p + "-y", Mark: "perm"}, Stored{Kind: "watch", Key: p + "-x," + p + "-y", Mark: "perm"})
		assertQueued(t, h, want)
	})

	t.Run("a drained command published again is not stored again", func(t *testing.T) {
		h, p := newHarness(t), prefix()
		cmds := sample(p, 1, "x")
		for _, c := range cmds {
			mustPublish(t, h, c)
		}
		h.Drain(t)
		assertQueued(t, h, nil)
		for _, c := range cmds {
			mustPublish(t, h, c)
		}
		assertQueued(t, h, nil)
	})

	t.Run("a failed publication stores nothing and its retry stores the command once", func(t *testing.T) {
		h, p := newHarness(t), prefix()
		done, cancel := context.WithCancel(context.Background())
		cancel()
		cmds := sample(p, 1, "r")
		for _, c := range cmds {
			if err := publish(done, h.Commands, c); err == nil {
				t.Errorf("publishing %T with a done context = nil, want an error", c)
			}
		}
		assertQueued(t, h, nil)
		for range 2 {
			for _, c := range cmds {
				mustPublish(t, h, c)
			}
		}
		assertQueued(t, h, stored(cmds))
	})

	t.Run("a full queue refuses every new command, keeps the queued ones and takes them again once drained", func(t *testing.T) {
		h, p := newHarness(t), prefix()
		ctx := context.Background()
		h.Limit(t, 2)
		first := hook(p+"-q1", 1, "q")
		second := hook(p+"-q2", 1, "q")
		mustPublish(t, h, first)
		mustPublish(t, h, second)
		refused := sample(p, 1, "late")
		for _, c := range refused {
			err := publish(ctx, h.Commands, c)
			if !errors.Is(err, ports.ErrCommandQueueFull) {
				t.Errorf("publishing %T to a full queue: err = %v, want ErrCommandQueueFull", c, err)
			}
		}
		// A command the queue already holds is no new command: its
		// republication (after a lost acknowledgement) succeeds.
		if err := publish(ctx, h.Commands, first); err != nil {
			t.Errorf("republishing a queued command to a full queue: %v", err)
		}
		assertQueued(t, h, stored([]any{first, second}))

		h.Drain(t)
		for _, c := range refused[:2] {
			mustPublish(t, h, c)
		}
		assertQueued(t, h, stored(refused[:2]))
		if err := publish(ctx, h.Commands, refused[2]); !errors.Is(err, ports.ErrCommandQueueFull) {
			t.Errorf("third command after the drain: err = %v, want ErrCommandQueueFull", err)
		}
	})
}

func prefix() string { return fmt.Sprintf("c%d", prefixes.Add(1)) }

// sample returns one command of each kind for the ids under p, at attempt
// a, marked m.
func sample(p string, a uint32, m string) []any {
	ref := func(id string) ports.InstanceRef {
		return ports.InstanceRef{InstanceID: p + "-" + id, Group: "g", Attempt: a, CloudID: "vm-" + id}
	}
	target := ports.Target{Provider: "tencentcloud", Account: "dev", Region: m}
	return []any{
		ports.CreateCommand{BatchID: p + "-batch", ClientToken: m, Attempt: a, Group: "g", ClusterID: "c",
			Template:  domain.InstanceTemplate{Name: "t", Provider: "tencentcloud", Account: "dev", Region: "r", ParametersJSON: `{}`},
			Instances: []ports.InstanceRef{ref("1"), ref("2")}},
		hook(p+"-1", a, m),
		ports.WatchCommand{Target: target, Instances: []ports.InstanceRef{ref("1")}},
		ports.TerminateCommand{Target: target, ClusterID: m, Instances: []ports.InstanceRef{ref("2"), ref("1")}},
		ports.InventoryRequest{RequestID: p + "-inv", Target: target, ClusterID: m},
		ports.TagCommand{RequestID: p + "-tag", Target: target, ClusterID: m, Instances: []ports.InstanceRef{ref("1")}},
	}
}

func hook(instance string, a uint32, m string) ports.HookCommand {
	return ports.HookCommand{InstanceID: instance, Group: "g", Attempt: a, Kind: domain.HookAfterCreated,
		Host: "10.0.0.1", Port: 22, Script: m, Timeout: time.Minute}
}

func publish(ctx context.Context, c ports.Commands, cmd any) error {
	switch x := cmd.(type) {
	case ports.CreateCommand:
		return c.Create(ctx, x)
	case ports.WatchCommand:
		return c.Watch(ctx, x)
	case ports.TerminateCommand:
		return c.Terminate(ctx, x)
	case ports.HookCommand:
		return c.RunHook(ctx, x)
	case ports.InventoryRequest:
		return c.ListInventory(ctx, x)
	case ports.TagCommand:
		return c.Tag(ctx, x)
	}
	panic(fmt.Sprintf("commandstest: no such command %T", cmd))
}

func mustPublish(t *testing.T, h Harness, cmd any) {
	t.Helper()
	if err := publish(context.Background(), h.Commands, cmd); err != nil {
		t.Fatalf("publishing %T: %v", cmd, err)
	}
}

// Reduce maps a ports command to what the queue is compared by.
func Reduce(cmd any) Stored {
	ids := func(rs []ports.InstanceRef) string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = r.InstanceID
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	switch x := cmd.(type) {
	case ports.CreateCommand:
		return Stored{Kind: "create", Key: x.BatchID, Attempt: x.Attempt, Mark: x.ClientToken}
	case ports.WatchCommand:
		return Stored{Kind: "watch", Key: ids(x.Instances), Mark: x.Target.Region}
	case ports.TerminateCommand:
		return Stored{Kind: "terminate", Key: ids(x.Instances), Mark: x.ClusterID}
	case ports.HookCommand:
		return Stored{Kind: "hook", Key: x.InstanceID, Attempt: x.Attempt, Mark: x.Script}
	case ports.InventoryRequest:
		return Stored{Kind: "inventory", Key: x.RequestID, Mark: x.ClusterID}
	case ports.TagCommand:
		return Stored{Kind: "tag", Key: x.RequestID, Mark: x.ClusterID}
	}
	panic(fmt.Sprintf("commandstest: no such command %T", cmd))
}

func stored(cmds []any) []Stored {
	out := make([]Stored, len(cmds))
	for i, c := range cmds {
		out[i] = Reduce(c)
	}
	return out
}

// assertQueued compares the queue with want, in any order: the port
// promises no order between commands (each kind goes to its own worker).
func assertQueued(t *testing.T, h Harness, want []Stored) {
	t.Helper()
	got := h.Queued(t)
	key := func(s Stored) string { return s.String() }
	g, w := sortedBy(got, key), sortedBy(want, key)
	if !slices.Equal(g, w) {
		t.Errorf("queue holds\n  %v\nwant\n  %v", g, w)
	}
}

func sortedBy(s []Stored, key func(Stored) string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = key(x)
	}
	slices.Sort(out)
	return out
}
