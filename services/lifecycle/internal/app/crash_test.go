package app_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"sort"
	"sync"
	"testing"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/memory"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

var errCrashed = errors.New("process crashed")

// crashStore lets the first n writes through, then "kills the process":
// every later write fails, as if the process were gone.
type crashStore struct {
	ports.Store
	mu      sync.Mutex
	left    int
	crashed bool
}

func (s *crashStore) allow() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.left <= 0 {
		s.crashed = true
		return errCrashed
	}
	s.left--
	return nil
}

func (s *crashStore) dead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.crashed
}

func (s *crashStore) CreateGroup(ctx context.Context, g domain.NodeGroup) (uint64, error) {
	if err := s.allow(); err != nil {
		return 0, err
	}
	return s.Store.CreateGroup(ctx, g)
}

func (s *crashStore) UpdateGroup(ctx context.Context, g domain.NodeGroup, r uint64) (uint64, error) {
	if err := s.allow(); err != nil {
		return 0, err
	}
	return s.Store.UpdateGroup(ctx, g, r)
}

func (s *crashStore) CreateInstance(ctx context.Context, i domain.Instance) (uint64, error) {
	if err := s.allow(); err != nil {
		return 0, err
	}
	return s.Store.CreateInstance(ctx, i)
}

func (s *crashStore) UpdateInstance(ctx context.Context, i domain.Instance, r uint64) (uint64, error) {
	if err := s.allow(); err != nil {
		return 0, err
	}
	return s.Store.UpdateInstance(ctx, i, r)
}

// crashCommands stops publishing once the store has crashed.
type crashCommands struct {
	*memory.Commands
	store *crashStore
}

func (c crashCommands) Create(ctx context.Context, cmd ports.CreateCommand) error {
	if c.store != nil && c.store.dead() {
		return errCrashed
	}
	return c.Commands.Create(ctx, cmd)
}

func (c crashCommands) Watch(ctx context.Context, cmd ports.WatchCommand) error {
	if c.store != nil && c.store.dead() {
		return errCrashed
	}
	return c.Commands.Watch(ctx, cmd)
}

func (c crashCommands) Terminate(ctx context.Context, cmd ports.TerminateCommand) error {
	if c.store != nil && c.store.dead() {
		return errCrashed
	}
	return c.Commands.Terminate(ctx, cmd)
}

func (c crashCommands) RunHook(ctx context.Context, cmd ports.HookCommand) error {
	if c.store != nil && c.store.dead() {
		return errCrashed
	}
	return c.Commands.RunHook(ctx, cmd)
}

// world is what survives a crash: the store, the command stream, the cloud
// (idempotent per ClientToken) and the undelivered events.
type world struct {
	t       *testing.T
	store   *memory.Store
	stream  *memory.Commands
	clock   *memory.Clock
	tokens  map[string][]string // token -> cloud ids
	vmOwner map[string]string   // cloud id -> instance id
	alive   map[string]bool     // cloud id -> exists
	handled struct{ creates, watches, hooks, terminates int }
	pending []pendingEvent
	nextVM  int
}

type pendingEvent struct {
	id string
	ev domain.Event
}

func newWorld(t *testing.T) *world {
	return &world{
		t: t, store: memory.NewStore(), stream: &memory.Commands{}, clock: memory.NewClock(t0),
		tokens: map[string][]string{}, vmOwner: map[string]string{}, alive: map[string]bool{},
	}
}

func (w *world) newApp(store ports.Store, cmds ports.Commands, seed int) *app.App {
	seq := 0
	return app.New(app.DefaultOptions(), app.Deps{
		Store: store, Commands: cmds, Clock: w.clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Random: func(n int) string {
			seq++
			s := fmt.Sprintf("%02d%0*d", seed, n-2, seq)
			out := []byte(s)
			for i, c := range out {
				out[i] = domain.IDAlphabet[c-'0']
			}
			return string(out)
		},
		Jitter: func() float64 { return 0 },
	})
}

// work plays the workers for every command in the stream not yet handled
// and delivers events; events the app fails to handle stay pending (the
// stream redelivers them).
func (w *world) work(a *app.App) {
	c := w.stream.Snapshot()
	for _, cr := range c.Creates[w.handled.creates:] {
		ids := w.tokens[cr.ClientToken]
		for len(ids) < len(cr.Instances) {
			w.nextVM++
			id := fmt.Sprintf("ins-%d", w.nextVM)
			w.vmOwner[id] = cr.Instances[len(ids)].InstanceID
			w.alive[id] = true
			ids = append(ids, id)
		}
		w.tokens[cr.ClientToken] = ids
		for i, r := range cr.Instances {
			w.pending = append(w.pending, pendingEvent{r.InstanceID, domain.CloudCreated{Attempt: r.Attempt, BatchID: cr.BatchID, CloudID: ids[i]}})
			// The create command goes on to watch its VMs.
			w.pending = append(w.pending, pendingEvent{r.InstanceID, domain.CloudObserved{Attempt: r.Attempt, State: domain.CloudRunning, PrivateIP: "10.0.0.1"}})
		}
	}
	for _, wc := range c.Watches[w.handled.watches:] {
		for _, r := range wc.Instances {
			w.pending = append(w.pending, pendingEvent{r.InstanceID, domain.CloudObserved{Attempt: r.Attempt, State: domain.CloudRunning, PrivateIP: "10.0.0.1"}})
		}
	}
	for _, hk := range c.Hooks[w.handled.hooks:] {
		w.pending = append(w.pending, pendingEvent{hk.InstanceID, domain.HookFinished{Attempt: hk.Attempt, Kind: hk.Kind, Succeeded: true}})
	}
	for _, tc := range c.Terminates[w.handled.terminates:] {
		for _, r := range tc.Instances {
			w.alive[r.CloudID] = false
			w.pending = append(w.pending, pendingEvent{r.InstanceID, domain.CloudTerminated{Attempt: r.Attempt}})
		}
	}
	w.handled.creates, w.handled.watches, w.handled.hooks, w.handled.terminates =
		len(c.Creates), len(c.Watches), len(c.Hooks), len(c.Terminates)
	var keep []pendingEvent
	for _, p := range w.pending {
		if err := a.HandleEvent(context.Background(), p.id, p.ev); err != nil {
			keep = append(keep, p)
		}
	}
	w.pending = keep
}

// run alternates passes and work until stable or the process died.
func (w *world) run(a *app.App, cs *crashStore) {
	for range 60 {
		if cs != nil && cs.dead() {
			return
		}
		before := w.store.Writes()
		a.Pass(context.Background())
		w.work(a)
		a.Pass(context.Background())
		if w.store.Writes() == before && len(w.pending) == 0 {
			return
		}
	}
}

// The process dies after every possible number of writes during a
// scale-up and a scale-down; a new process on the same store must finish
// the job with no instance lost or stuck and no VM duplicated or leaked.
func TestCrashAtEveryWriteRecovers(t *testing.T) {
	g := group("g", 0, 10, 0)
	ctx := context.Background()
	// scenario drives the client side (CA): it re-evaluates after errors
	// as CA does, from the target it reads.
	scenario := func(w *world, a *app.App, cs *crashStore) {
		grp, _ := a.Group("g")
		if grp.TargetSize < 3 && !released(a) {
			if _, err := a.IncreaseSize(ctx, "g", 3-grp.TargetSize); err != nil {
				return
			}
		}
		w.run(a, cs)
		if cs != nil && cs.dead() {
			return
		}
		if !released(a) {
			var victim domain.Instance
			for _, in := range a.Instances("g") {
				if in.State == domain.StateRunning {
					victim = in
					break
				}
			}
			if victim.ID == "" {
				return
			}
			if _, err := a.DeleteNodes(ctx, "g", []app.NodeRef{{ProviderID: victim.ProviderID}}); err != nil {
				return
			}
		}
		w.run(a, cs)
	}

	// Count the writes of an uninterrupted run.
	clean := newWorld(t)
	a := clean.newApp(clean.store, clean.stream, 1)
	if err := a.SetConfig(ctx, []domain.NodeGroup{g}); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	scenario(clean, a, nil)
	checkWorld(t, clean, a)
	total := clean.store.Writes()
	if total < 20 {
		t.Fatalf("scenario made only %d writes", total)
	}

	for n := 0; n <= total; n++ {
		t.Run(fmt.Sprintf("crash after %d writes", n), func(t *testing.T) {
			w := newWorld(t)
			cs := &crashStore{Store: w.store, left: n}
			a1 := w.newApp(cs, crashCommands{Commands: w.stream, store: cs}, 1)
			_ = a1.SetConfig(ctx, []domain.NodeGroup{g})
			if err := a1.Start(ctx); err != nil {
				t.Fatal(err)
			}
			scenario(w, a1, cs)
			a1.Stop()

			a2 := w.newApp(w.store, crashCommands{Commands: w.stream}, 2)
			if err := a2.SetConfig(ctx, []domain.NodeGroup{g}); err != nil {
				t.Fatal(err)
			}
			if err := a2.Start(ctx); err != nil {
				t.Fatal(err)
			}
			scenario(w, a2, nil)
			checkWorld(t, w, a2)
		})
	}
}

// As TestCrashAtEveryWriteRecovers, with the new process a warm standby:
// it loaded the records before the old leader started its work and caught
// up once midway, so the old leader's last writes (up to the crash) are
// ones it has not seen. Promoted, it must see them all (no full list) and
// finish the job.
func TestCrashAtEveryWriteRecoversOnWarmStandby(t *testing.T) {
	g := group("g", 0, 10, 0)
	ctx := context.Background()
	for n := 0; n <= 40; n++ {
		t.Run(fmt.Sprintf("crash after %d writes", n), func(t *testing.T) {
			w := newWorld(t)
			cs := &crashStore{Store: w.store, left: n}
			a1 := w.newApp(cs, crashCommands{Commands: w.stream, store: cs}, 1)
			_ = a1.SetConfig(ctx, []domain.NodeGroup{g})
			if err := a1.Start(ctx); err != nil {
				t.Fatal(err)
			}
			a2 := w.newApp(w.store, crashCommands{Commands: w.stream}, 2)
			if err := a2.SetConfig(ctx, []domain.NodeGroup{g}); err != nil {
				t.Fatal(err)
			}
			if err := a2.Follow(ctx); err != nil {
				t.Fatal(err)
			}
			if grp, _ := a1.Group("g"); grp.TargetSize < 3 {
				if _, err := a1.IncreaseSize(ctx, "g", 3-grp.TargetSize); err == nil {
					w.run(a1, cs)
				}
			}
			if err := a2.Follow(ctx); err != nil {
				t.Fatal(err)
			}
			if !cs.dead() {
				for _, in := range a1.Instances("g") {
					if in.State == domain.StateRunning {
						if _, err := a1.DeleteNodes(ctx, "g", []app.NodeRef{{ProviderID: in.ProviderID}}); err == nil {
							w.run(a1, cs)
						}
						break
					}
				}
			}
			a1.Stop()

			lists := w.store.InstanceLists()
			if err := a2.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if got := w.store.InstanceLists(); got != lists {
				t.Fatalf("the promotion listed every instance")
			}
			stored, err := w.store.ListInstances(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cached := map[string]domain.Instance{}
			for _, in := range a2.Instances("g") {
				cached[in.ID] = in
			}
			if len(cached) != len(stored) {
				t.Fatalf("promoted standby holds %d records, the store %d", len(cached), len(stored))
			}
			for _, v := range stored {
				if c, ok := cached[v.Instance.ID]; !ok || !reflect.DeepEqual(c, v.Instance) {
					t.Fatalf("%s: promoted standby holds %+v, the store %+v", v.Instance.ID, c, v.Instance)
				}
			}
			if err := a2.CheckIndex(); err != nil {
				t.Fatal(err)
			}
			grp, _ := a2.Group("g")
			if grp.TargetSize < 3 && !released(a2) {
				if _, err := a2.IncreaseSize(ctx, "g", 3-grp.TargetSize); err != nil {
					t.Fatal(err)
				}
			}
			w.run(a2, nil)
			if !released(a2) {
				for _, in := range a2.Instances("g") {
					if in.State == domain.StateRunning {
						if _, err := a2.DeleteNodes(ctx, "g", []app.NodeRef{{ProviderID: in.ProviderID}}); err != nil {
							t.Fatal(err)
						}
						break
					}
				}
			}
			w.run(a2, nil)
			checkWorld(t, w, a2)
		})
	}
}

// released reports whether the scale-down already happened.
func released(a *app.App) bool {
	for _, in := range a.Instances("g") {
		if in.Released && in.State != domain.StatePending {
			return true
		}
	}
	return false
}

func checkWorld(t *testing.T, w *world, a *app.App) {
	t.Helper()
	grp, _ := a.Group("g")
	live := map[string]domain.Instance{}
	for _, in := range a.Instances("g") {
		if in.Live() {
			live[in.ID] = in
			if in.State != domain.StateRunning {
				t.Errorf("%s stuck in %s (in flight %v, error %+v)", in.ID, in.State, in.InFlight, in.LastError)
			}
		} else if in.State != domain.StateDeleted {
			t.Errorf("%s stuck in %s", in.ID, in.State)
		}
	}
	if grp.TargetSize != 2 || len(live) != 2 {
		t.Errorf("target %d, live %d; want 2 and 2", grp.TargetSize, len(live))
	}
	// Every VM that exists belongs to a live instance, and each live
	// instance has exactly one VM: nothing leaked, nothing duplicated.
	perInstance := map[string]int{}
	var alive []string
	for id, ok := range w.alive {
		if ok {
			alive = append(alive, id)
			perInstance[w.vmOwner[id]]++
		}
	}
	sort.Strings(alive)
	for _, id := range alive {
		if _, ok := live[w.vmOwner[id]]; !ok {
			t.Errorf("VM %s of %s leaked", id, w.vmOwner[id])
		}
	}
	for id, in := range live {
		if perInstance[id] != 1 {
			t.Errorf("%s has %d VMs", id, perInstance[id])
		}
		if in.CloudID == "" || !w.alive[in.CloudID] {
			t.Errorf("%s runs on VM %q that does not exist", id, in.CloudID)
		}
	}
	created := map[string]int{}
	for _, owner := range w.vmOwner {
		created[owner]++
	}
	for id, n := range created {
		if n > 1 {
			t.Errorf("%s got %d VMs created: a duplicate create was not absorbed", id, n)
		}
	}
}
