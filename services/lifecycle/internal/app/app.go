// Package app holds lifecycle's use cases: the operations Cluster
// Autoscaler and operators ask for, the handling of worker results, and the
// dispatcher that drives every instance to its next step.
//
// Lifecycle is the only writer of state. While leader, the App keeps every
// group and instance in memory (loaded at start) and serialises all changes
// under one mutex; each change is written to the store with compare-and-set
// on the revision it read, so even two overlapping leaders cannot lose an
// update. Commands are derived from the records (domain.PendingCommand): the
// records are the outbox.
package app

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/bulkload"
	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/libs/backoff"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// Options tune the application.
type Options struct {
	Policy domain.Policy
	// ClusterID tags created VMs (the reconciler lists by it).
	ClusterID string
	// CreateParallelism and DeleteParallelism are the per-group defaults of
	// in-flight creations and deletions; groups may override them.
	CreateParallelism int
	DeleteParallelism int
	// AccountCreateParallelism and AccountDeleteParallelism cap in-flight
	// work per cloud account across groups.
	AccountCreateParallelism int
	AccountDeleteParallelism int
	// MaxBatch caps instances per create call (RunInstances takes 100).
	MaxBatch int
	// CreateLinger is how long a group's Pending instances may wait for a
	// fuller create batch while the group's own creations are in flight
	// and free their slots one by one (0: never waits). Fewer, fuller
	// calls matter because the cloud rate-limits calls, not VMs.
	CreateLinger time.Duration
	// TickInterval is how often the dispatcher runs without being woken.
	TickInterval time.Duration
	// DeletedRetention is how long Deleted records are kept.
	DeletedRetention time.Duration
	// PurgeInterval and PurgeBatch bound the purge of old Deleted records.
	PurgeInterval time.Duration
	PurgeBatch    int
	// ReconcileInterval is how often cloud inventory is compared with the
	// records (0 disables); OrphanGrace is how old an untracked VM must be
	// before it is terminated.
	ReconcileInterval time.Duration
	OrphanGrace       time.Duration
	// MaxOrphanTerminations caps the orphan VMs one inventory comparison
	// (one account and region, each pass) terminates, the oldest first;
	// the rest wait for later passes. 0 terminates none: orphans are
	// only reported.
	MaxOrphanTerminations int
	// EmptyStartOrphanHold is the start-up hold: after a load that finds
	// no instance record, orphan VMs created before it are held back
	// (reported, not terminated) this long, unless an operator releases
	// them first (ReleaseOrphans). 0 disables the hold.
	EmptyStartOrphanHold time.Duration
	// CASRetries bounds compare-and-set retries of one operation.
	CASRetries int
	// StatusInterval is how often the status summary is written when it
	// changed; StatusErrors bounds its recent errors.
	StatusInterval time.Duration
	StatusErrors   int
	// RequestTTL is how long the outcome of an operation answers repeats
	// of its request id; RequestLogSize bounds how many are remembered (the
	// oldest are forgotten first). A zero TTL disables the request log.
	RequestTTL     time.Duration
	RequestLogSize int
	// RequestsPerGroup bounds the applied requests a group record keeps
	// (requests.go); the oldest are dropped first. Zero means the default.
	RequestsPerGroup int
	// StandbyInterval is how often a replica that is not leading reads the
	// instance records changed since it last looked (RunStandby), so that
	// a promotion reads only the changes of the last interval.
	StandbyInterval time.Duration
	// MaxEventsPerPass bounds the deadlines and node changes one
	// dispatcher pass applies (0: no bound); the rest wait for the next
	// pass, which runs at once.
	MaxEventsPerPass int
}

// DefaultOptions returns production defaults.
func DefaultOptions() Options {
	return Options{
		Policy:                   domain.DefaultPolicy(),
		ClusterID:                "nodesmith",
		CreateParallelism:        100,
		DeleteParallelism:        10,
		AccountCreateParallelism: 100,
		AccountDeleteParallelism: 100,
		MaxBatch:                 100,
		CreateLinger:             time.Second,
		TickInterval:             time.Second,
		DeletedRetention:         15 * 24 * time.Hour,
		PurgeInterval:            10 * time.Minute,
		PurgeBatch:               100,
		ReconcileInterval:        time.Minute,
		OrphanGrace:              2 * time.Minute,
		MaxOrphanTerminations:    10,
		EmptyStartOrphanHold:     24 * time.Hour,
		CASRetries:               5,
		StatusInterval:           10 * time.Second,
		StatusErrors:             20,
		RequestTTL:               10 * time.Minute,
		RequestLogSize:           100_000,
		RequestsPerGroup:         defaultRequestsPerGroup,
		StandbyInterval:          2 * time.Second,
		MaxEventsPerPass:         1000,
	}
}

// Deps are the ports the App drives.
type Deps struct {
	Store    ports.Store
	Commands ports.Commands
	// Cluster is optional: without it an instance is Running as soon as
	// its after_created hook succeeded.
	Cluster  ports.Cluster
	Clock    ports.Clock
	Logger   *slog.Logger
	Observer Observer
	// Notifier is optional: notices about instances on their Nodes
	// (Kubernetes Events).
	Notifier ports.Notifier
	// Status is optional: where the status summary is published.
	Status ports.StatusSink
	// Random returns a string of n characters of domain.IDAlphabet; tests
	// inject a deterministic one.
	Random func(n int) string
	// Jitter returns a value in [-1, 1].
	Jitter func() float64
	// Tracer is optional: spans of dispatch and reconciler passes, and the
	// trace context stamped on instances (see tracing.go).
	Tracer ports.Tracer
	// Sealer seals the hook environment values and secret parameters of
	// the configuration file and re-seals stored ones under the newest key
	// (sealing.go); nil refuses such values. A *sealed.Key.
	Sealer Sealer
	// Holds persists the orphan hold and release (reconcile.go). Optional:
	// when nil, the Store is used if it implements ports.HoldStore, else
	// the hold lives in this process's memory only.
	Holds ports.HoldStore
	// Catalog stores the catalog of named templates, accounts and hooks
	// (catalog.go). Optional: without it the catalog is empty and catalog
	// writes are refused. The memory and NATS KV stores implement it.
	Catalog ports.CatalogStore
}

// App is the lifecycle application. It keeps the exported operations and
// wires the components that carry them out around the single-writer
// cache (one mutex, cache.mu, serialises every change):
//
//   - cache: the records in memory, their indexes and their CAS writes,
//     and Apply (a machine event on a record);
//   - catalog: named templates, accounts and hooks, and the convergence of
//     the groups that use them (with seals, the sealing of secret values);
//   - requests: op (an operation under the lock, with CAS retries) and the
//     outcomes of operations by request id;
//   - nodes: the Kubernetes Nodes seen, their adoption, and tagging VMs;
//   - scheduler: the dispatcher's pass, the outbox and its index;
//   - reconciler: cloud inventory against the records, and the orphan hold.
//
// The components' exported operations are promoted to App.
type App struct {
	*cache
	*catalog
	*requests
	*nodes
	*scheduler
	*reconciler

	status ports.StatusSink
	// configGroups is the latest valid file configuration.
	configGroups []domain.NodeGroup
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// New returns an App; call Start when leadership is acquired.
func New(opts Options, d Deps) *App {
	if d.Clock == nil {
		d.Clock = realClock{}
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Observer == nil {
		d.Observer = NopObserver{}
	}
	if d.Random == nil {
		d.Random = randomString
	}
	if d.Jitter == nil {
		d.Jitter = func() float64 { return mrand.Float64()*2 - 1 }
	}
	if d.Tracer == nil {
		d.Tracer = nopTracer{}
	}
	if d.Holds == nil {
		d.Holds, _ = d.Store.(ports.HoldStore)
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 100
	}
	if opts.CASRetries <= 0 {
		opts.CASRetries = 5
	}
	if opts.TickInterval <= 0 {
		opts.TickInterval = time.Second
	}
	feed, _ := d.Store.(ports.InstanceFeed)
	c := &cache{
		opts:       opts,
		store:      d.Store,
		feed:       feed,
		cmds:       d.Commands,
		cluster:    d.Cluster,
		clock:      d.Clock,
		log:        d.Logger,
		obs:        d.Observer,
		notify:     d.Notifier,
		random:     d.Random,
		jitter:     d.Jitter,
		tracer:     d.Tracer,
		groups:     map[string]*groupRec{},
		appliedIn:  map[string]map[string]struct{}{},
		insts:      map[string]*instRec{},
		byProvider: map[string]string{},
		idx:        newInstIndex(),
		published:  map[string]uint32{},
		wake:       make(chan struct{}, 1),
		known:      newNodeCache(),
	}
	req := newRequests(c)
	cat := newCatalog(c, req, d.Catalog, d.Sealer)
	req.cat = &cat.cat
	n := newNodes(c)
	rec := newReconciler(c, req, d.Holds)
	a := &App{
		cache:      c,
		catalog:    cat,
		requests:   req,
		nodes:      n,
		scheduler:  newScheduler(c, n, req),
		reconciler: rec,
		status:     d.Status,
	}
	c.created = rec.noteInstanceRecordLocked
	return a
}

// randomString returns n characters of domain.IDAlphabet from crypto/rand.
func randomString(n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(strings.ToLower(rand.Text()))
	}
	return b.String()[:n]
}

// ErrNotLeader is returned by operations while the App is not started
// (this replica is not the leader, or is still loading).
var ErrNotLeader = &domain.Error{Code: contract.CodeUnavailable, Msg: "lifecycle is not leading (starting or lost leadership)"}

// Start loads every record into memory (a warm standby catches up from
// what it holds: standby.go) and applies the file configuration.
// It retries the load until ctx ends, so a store that is briefly unavailable
// delays leadership rather than failing it.
func (a *App) Start(ctx context.Context) error {
	b := backoff.Policy{Initial: 200 * time.Millisecond, Max: 5 * time.Second, Jitter: backoff.JitterNone}.New()
	for {
		err := a.load(ctx)
		if err == nil {
			break
		}
		d := b.Next()
		a.log.Warn("loading state failed, retrying", "err", err, "in", d)
		if werr := backoff.Wait(ctx, d); werr != nil {
			return fmt.Errorf("loading state: %w", werr)
		}
	}
	if a.cluster == nil {
		a.log.Warn("no cluster configured: instances become Running as soon as their after_created hook succeeds (node readiness is not checked, labels and taints are not applied)")
	}
	a.mu.Lock()
	cfg := a.configGroups
	a.mu.Unlock()
	if cfg != nil {
		if err := a.ApplyConfig(ctx, cfg); err != nil {
			// The groups that applied are in place; the others are logged
			// and retried at the next reload or restart.
			a.log.Error("applying configuration", "err", err)
		}
	}
	a.Wake()
	return nil
}

// loadAll reads every instance record into the cache, with the collector
// kept tight while it does (libs/bulkload), and returns how many it read.
// The leader's load and the standby's first read both use it; loadMu is
// held.
func (a *App) loadAll(ctx context.Context) (int, error) {
	defer bulkload.Begin()()
	pos, err := a.feedPos(ctx)
	if err != nil {
		return 0, err
	}
	is, err := a.store.ListInstances(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing instances: %w", err)
	}
	a.mu.Lock()
	a.setInstancesLocked(is, pos)
	a.mu.Unlock()
	releaseLoadGarbage(len(is))
	return len(is), nil
}

func (a *App) load(ctx context.Context) error {
	a.loadMu.Lock()
	defer a.loadMu.Unlock()
	gs, err := a.store.ListGroups(ctx)
	if err != nil {
		return fmt.Errorf("listing groups: %w", err)
	}
	// A standby that kept the instance records reads what changed since;
	// else (or should that fail) every record is read.
	warm := a.catchUp(ctx)
	if !warm {
		if _, err := a.loadAll(ctx); err != nil {
			return err
		}
	}
	cat, err := a.listCatalog(ctx)
	if err != nil {
		return fmt.Errorf("listing the catalog: %w", err)
	}
	stored, err := a.loadHold(ctx)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.setCatalogLocked(cat)
	a.resetGroupsLocked(len(gs))
	for _, g := range gs {
		a.setGroupLocked(g.Group, g.Revision)
	}
	a.lingerSince = map[string]time.Time{}
	inFlight := 0
	for _, r := range a.insts {
		if r.Instance.InFlight {
			inFlight++
		}
	}
	// A new term re-publishes every in-flight command: any of them may have
	// been lost between the write and the publish. Identical message ids
	// are deduplicated by the stream; workers are idempotent.
	a.published = map[string]uint32{}
	// The node watch restarts with the term: until it is synced again, a
	// Node missing from the cache proves nothing.
	a.known.unsync()
	// The last leader may have died between an operation's group write and
	// its instance writes.
	a.releasesDue = true
	a.loaded = true
	// The leader's writes change the records from here on: the standby
	// copy is the cache until Stop.
	a.warm = false
	a.log.Info("state loaded", "groups", len(gs), "instances", len(a.insts), "in_flight", inFlight, "caught_up", warm)
	// The stored hold and release go on, whoever leads; a start from no
	// instance record (a fresh install, or lost state: tagged VMs already
	// in the cloud may be this cluster's nodes rather than orphans) takes
	// a new one unless it is the one the stored hold was taken on.
	return a.resumeHoldLocked(ctx, stored, len(a.insts) == 0)
}

// Stop forgets the cache (leadership lost): operations fail with
// ErrNotLeader until the next Start.
func (a *App) Stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.loaded = false
}
