package app_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/testwait"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/memory"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

var t0 = time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)

type harness struct {
	t       *testing.T
	ctx     context.Context
	app     *app.App
	store   *memory.Store
	cmds    *memory.Commands
	clock   *memory.Clock
	cluster *memory.Cluster
	notices *memory.Notifier
	status  *memory.StatusSink
	opts    app.Options
	// sealer seals hook env values (withSealer); nil: none.
	sealer app.Sealer
	// holds, when set, stores the orphan hold instead of store.
	holds ports.HoldStore
	// obs, when set, observes the App (metrics).
	obs app.Observer
	// cloud ids handed out, to answer creates.
	mu     sync.Mutex
	nextVM int
	// handled counts the recorded commands already answered.
	handled struct{ creates, watches, hooks, terminates int }
}

func group(id string, min, max, target int) domain.NodeGroup {
	return domain.NodeGroup{
		ID: id, MinSize: min, MaxSize: max, TargetSize: target,
		Template: domain.InstanceTemplate{Name: "small", Provider: "tencentcloud", Account: "dev", Region: "ap-guangzhou"},
		NodeTemplate: domain.NodeTemplate{
			Labels: map[string]string{"role": id},
			Taints: []domain.Taint{{Key: "dedicated", Value: id, Effect: "NoSchedule"}},
		},
		Hooks: domain.Hooks{
			AfterCreated: &domain.HookSpec{Name: "join", Script: "kubeadm join"},
			BeforeDelete: &domain.HookSpec{Name: "drain", Script: "drain"},
		},
	}
}

type harnessOpt func(*harness)

func withCluster() harnessOpt { return func(h *harness) { h.cluster = memory.NewCluster() } }

// withClusterNoSynced uses a cluster whose watch never says it is synced.
func withClusterNoSynced() harnessOpt {
	return func(h *harness) {
		h.cluster = memory.NewCluster()
		h.cluster.NoSyncedEvent = true
	}
}

// withSealer gives the App a sealing key ring (hook env values).
func withSealer(s app.Sealer) harnessOpt { return func(h *harness) { h.sealer = s } }

func withOptions(f func(*app.Options)) harnessOpt { return func(h *harness) { f(&h.opts) } }

func newHarness(t *testing.T, groups []domain.NodeGroup, opts ...harnessOpt) *harness {
	t.Helper()
	h := &harness{
		t: t, ctx: context.Background(),
		store: memory.NewStore(), cmds: &memory.Commands{}, clock: memory.NewClock(t0),
		notices: &memory.Notifier{}, status: &memory.StatusSink{},
		opts: app.DefaultOptions(),
	}
	h.opts.ReconcileInterval = 0
	for _, o := range opts {
		o(h)
	}
	h.app = h.newApp()
	if err := h.app.SetConfig(h.ctx, groups); err != nil {
		t.Fatal(err)
	}
	if err := h.app.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	if h.cluster != nil {
		h.watch()
	}
	return h
}

// watch runs the current App's node watcher until the test ends.
func (h *harness) watch() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	a := h.app
	go func() { defer close(done); _ = a.RunNodeWatcher(ctx) }()
	h.t.Cleanup(func() { cancel(); <-done })
}

func (h *harness) newApp() *app.App {
	var seq int
	var mu sync.Mutex
	d := app.Deps{
		Store: h.store, Catalog: h.store, Commands: h.cmds, Clock: h.clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Random: func(n int) string {
			mu.Lock()
			defer mu.Unlock()
			seq++
			s := fmt.Sprintf("%0*d", n, seq)
			out := []byte(s)
			for i, c := range out {
				out[i] = domain.IDAlphabet[c-'0']
			}
			return string(out)
		},
		Jitter:   func() float64 { return 0 },
		Notifier: h.notices,
		Status:   h.status,
	}
	if h.cluster != nil {
		d.Cluster = h.cluster
	}
	if h.sealer != nil {
		d.Sealer = h.sealer
	}
	if h.holds != nil {
		d.Holds = h.holds
	}
	if h.obs != nil {
		d.Observer = h.obs
	}
	return app.New(h.opts, d)
}

// restart replaces the App by a new one on the same store, as a process
// restart would.
func (h *harness) restart(groups []domain.NodeGroup) {
	h.t.Helper()
	h.app.Stop()
	h.app = h.newApp()
	if groups != nil {
		if err := h.app.SetConfig(h.ctx, groups); err != nil {
			h.t.Fatal(err)
		}
	}
	if err := h.app.Start(h.ctx); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) instances(group string) []domain.Instance { return h.app.Instances(group) }

func (h *harness) byState(group string) map[domain.State]int {
	m := map[domain.State]int{}
	for _, in := range h.instances(group) {
		m[in.State]++
	}
	return m
}

func (h *harness) target(id string) int {
	g, ok := h.app.Group(id)
	if !ok {
		h.t.Fatalf("group %s missing", id)
	}
	return g.TargetSize
}

// answer plays the workers: every command recorded since the last call
// gets a successful result (a create's VMs are watched by the create
// command, as the cloud adapter does).
func (h *harness) answer() {
	h.t.Helper()
	c := h.cmds.Snapshot()
	for _, cr := range c.Creates[h.handled.creates:] {
		for _, r := range cr.Instances {
			h.mu.Lock()
			h.nextVM++
			id := fmt.Sprintf("ins-%d", h.nextVM)
			h.mu.Unlock()
			h.event(r.InstanceID, domain.CloudCreated{Attempt: r.Attempt, BatchID: cr.BatchID, CloudID: id})
			// The create command goes on to watch its VMs.
			h.event(r.InstanceID, domain.CloudObserved{Attempt: r.Attempt, State: domain.CloudRunning, PrivateIP: "10.0.0.1"})
		}
	}
	for _, w := range c.Watches[h.handled.watches:] {
		for _, r := range w.Instances {
			h.event(r.InstanceID, domain.CloudObserved{Attempt: r.Attempt, State: domain.CloudRunning, PrivateIP: "10.0.0.1"})
		}
	}
	for _, hk := range c.Hooks[h.handled.hooks:] {
		h.event(hk.InstanceID, domain.HookFinished{Attempt: hk.Attempt, Kind: hk.Kind, Succeeded: true})
	}
	for _, tc := range c.Terminates[h.handled.terminates:] {
		for _, r := range tc.Instances {
			h.event(r.InstanceID, domain.CloudTerminated{Attempt: r.Attempt})
		}
	}
	h.handled.creates, h.handled.watches, h.handled.hooks, h.handled.terminates =
		len(c.Creates), len(c.Watches), len(c.Hooks), len(c.Terminates)
}

func (h *harness) event(id string, ev domain.Event) {
	h.t.Helper()
	if err := h.app.HandleEvent(h.ctx, id, ev); err != nil {
		h.t.Fatalf("event %s for %s: %v", domain.EventName(ev), id, err)
	}
}

// settle alternates dispatcher passes and worker answers until nothing
// changes.
func (h *harness) settle() {
	h.t.Helper()
	for range 50 {
		before := h.store.Writes()
		h.app.Pass(h.ctx)
		h.answer()
		h.app.Pass(h.ctx)
		if h.store.Writes() == before {
			return
		}
	}
	h.t.Fatal("did not settle")
}

func (h *harness) ok(revs app.Revisions, err error) app.Revisions {
	h.t.Helper()
	if err != nil {
		h.t.Fatal(err)
	}
	return revs
}

func wantCode(t *testing.T, err error, c domain.Code) {
	t.Helper()
	if domain.CodeOf(err) != c {
		t.Fatalf("error %v has code %s, want %s", err, domain.CodeOf(err), c)
	}
}

var _ ports.Cluster = (*memory.Cluster)(nil)

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	testwait.Until(t, 10*time.Second, "the condition", cond)
}
