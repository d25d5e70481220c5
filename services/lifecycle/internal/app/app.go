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
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/libs/backoff"
	"github.com/nodesmith/nodesmith/libs/logging"
	"github.com/nodesmith/nodesmith/libs/providerid"

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
}

type groupRec struct {
	g   domain.NodeGroup
	rev uint64
}

type instRec struct {
	inst domain.Instance
	rev  uint64
}

// App is the lifecycle application.
type App struct {
	opts    Options
	store   ports.Store
	cmds    ports.Commands
	cluster ports.Cluster
	clock   ports.Clock
	log     *slog.Logger
	obs     Observer
	notify  ports.Notifier
	status  ports.StatusSink
	random  func(int) string
	jitter  func() float64
	tracer  ports.Tracer
	sealer  Sealer
	// sealedState is what the last re-seal pass logged (sealing.go).
	sealedState string

	mu     sync.Mutex
	loaded bool
	// groups is changed only by setGroupLocked and dropGroupLocked (and
	// resetGroupsLocked at load), which keep appliedIn.
	groups map[string]*groupRec
	// appliedIn indexes the groups' applied requests: request id -> the
	// ids of the groups recording it (expired records included until the
	// group is written again), so a repeat is found without a scan.
	appliedIn map[string]map[string]struct{}
	insts     map[string]*instRec
	// byProvider indexes instances by providerID (placeholder or real).
	byProvider map[string]string
	// idx indexes insts for the dispatcher (kept by setInstLocked and
	// dropInstLocked), so a pass costs what has work, not every record.
	idx instIndex
	// lingerSince is when a group's create batch started waiting for more
	// free slots (see Options.CreateLinger).
	lingerSince map[string]time.Time
	// nodesSeen is the node cache version the last full node check saw;
	// nodeRecheck forces a full check (a node change failed to apply).
	nodesSeen   uint64
	nodeRecheck bool
	// published remembers the attempt whose command was published per
	// instance, so the outbox publishes each (instance, attempt) once per
	// leadership term.
	published map[string]uint32
	// configGroups is the latest valid file configuration.
	configGroups []domain.NodeGroup
	lastPurge    time.Time
	inventory    *inventoryState
	// hold is the start-up hold of orphan VMs, releasedAt the time of an
	// operator's release and released the cloud ids it confirmed
	// (reconcile.go). They are stored (holds, at holdRev, taken on the
	// instances bucket holdBucket) and loaded with every term; saved is
	// the record last written.
	hold           startupHold
	releasedAt     time.Time
	released       map[string]bool
	releasedIDs    []string
	holds          ports.HoldStore
	holdRev        uint64
	holdBucket     string
	holdHadRecords bool
	holdSaved      ports.OrphanHold

	nodes *nodeCache
	wake  chan struct{}
	// requests remembers operation outcomes by request id (nil: disabled).
	requests *requestLog
	// releasesDue: an applied request may have instances left to release
	// (requests.go).
	releasesDue bool
	// adoptReported remembers, per Node, the last reason it was not
	// adopted, so it is reported once rather than every pass.
	adoptReported map[string]string
	// cat is the catalog of named templates, accounts and hooks (catalog.go).
	cat catalogState
	// tagWaiters are the AdoptVMs waiting for the cloud adapter's answer,
	// by request id (adopt_vms.go).
	tagWaiters map[string]chan TagResult
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
	var requests *requestLog
	if opts.RequestTTL > 0 {
		requests = newRequestLog(opts.RequestTTL, max(opts.RequestLogSize, 1))
	}
	return &App{
		requests:      requests,
		adoptReported: map[string]string{},
		opts:          opts,
		store:         d.Store,
		cmds:          d.Commands,
		cluster:       d.Cluster,
		clock:         d.Clock,
		log:           d.Logger,
		obs:           d.Observer,
		notify:        d.Notifier,
		status:        d.Status,
		random:        d.Random,
		jitter:        d.Jitter,
		tracer:        d.Tracer,
		sealer:        d.Sealer,
		holds:         d.Holds,
		groups:        map[string]*groupRec{},
		appliedIn:     map[string]map[string]struct{}{},
		insts:         map[string]*instRec{},
		byProvider:    map[string]string{},
		idx:           newInstIndex(),
		lingerSince:   map[string]time.Time{},
		published:     map[string]uint32{},
		nodes:         newNodeCache(),
		wake:          make(chan struct{}, 1),
	}
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

// Start loads every record into memory and applies the file configuration.
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

func (a *App) load(ctx context.Context) error {
	gs, err := a.store.ListGroups(ctx)
	if err != nil {
		return fmt.Errorf("listing groups: %w", err)
	}
	is, err := a.store.ListInstances(ctx)
	if err != nil {
		return fmt.Errorf("listing instances: %w", err)
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
	a.insts = make(map[string]*instRec, len(is))
	a.byProvider = make(map[string]string, len(is))
	a.idx = newInstIndex()
	a.lingerSince = map[string]time.Time{}
	inFlight := 0
	for _, v := range is {
		a.setInstLocked(v.Instance, v.Revision)
		if v.Instance.InFlight {
			inFlight++
		}
	}
	// A new term re-publishes every in-flight command: any of them may have
	// been lost between the write and the publish. Identical message ids
	// are deduplicated by the stream; workers are idempotent.
	a.published = map[string]uint32{}
	// The node watch restarts with the term: until it is synced again, a
	// Node missing from the cache proves nothing.
	a.nodes.unsync()
	// The last leader may have died between an operation's group write and
	// its instance writes.
	a.releasesDue = true
	a.loaded = true
	a.log.Info("state loaded", "groups", len(gs), "instances", len(is), "in_flight", inFlight)
	// The stored hold and release go on, whoever leads; a start from no
	// instance record (a fresh install, or lost state: tagged VMs already
	// in the cloud may be this cluster's nodes rather than orphans) takes
	// a new one unless it is the one the stored hold was taken on.
	return a.resumeHoldLocked(ctx, stored, len(is) == 0)
}

// Stop forgets the cache (leadership lost): operations fail with
// ErrNotLeader until the next Start.
func (a *App) Stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.loaded = false
}

// Wake makes the dispatcher run soon.
func (a *App) Wake() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// resetGroupsLocked empties the group cache, for size groups to come.
func (a *App) resetGroupsLocked(size int) {
	a.groups = make(map[string]*groupRec, size)
	a.appliedIn = map[string]map[string]struct{}{}
}

// setGroupLocked caches g at rev and returns its record. A cached record
// is updated in place, so a caller holding it sees the write.
func (a *App) setGroupLocked(g domain.NodeGroup, rev uint64) *groupRec {
	rec, ok := a.groups[g.ID]
	if !ok {
		rec = &groupRec{}
		a.groups[g.ID] = rec
	}
	old := rec.g.Applied
	rec.g, rec.rev = g, rev
	a.reindexAppliedLocked(g.ID, old, g.Applied)
	return rec
}

// dropGroupLocked forgets a group (deleted).
func (a *App) dropGroupLocked(id string) {
	if rec, ok := a.groups[id]; ok {
		a.reindexAppliedLocked(id, rec.g.Applied, nil)
		delete(a.groups, id)
	}
}

func (a *App) setInstLocked(in domain.Instance, rev uint64) {
	if old, ok := a.insts[in.ID]; ok {
		if old.inst.ProviderID != in.ProviderID {
			delete(a.byProvider, old.inst.ProviderID)
		}
		a.idx.remove(old.inst)
	}
	a.insts[in.ID] = &instRec{inst: in, rev: rev}
	a.byProvider[in.ProviderID] = in.ID
	a.byProvider[providerid.Placeholder(in.Group, in.ID)] = in.ID
	a.idx.add(in)
	if _, ok := domain.PendingCommand(in); !ok {
		// Nothing to publish: forget what was published for it.
		delete(a.published, in.ID)
	}
}

func (a *App) dropInstLocked(id string) {
	if r, ok := a.insts[id]; ok {
		delete(a.byProvider, r.inst.ProviderID)
		delete(a.byProvider, providerid.Placeholder(r.inst.Group, r.inst.ID))
		a.idx.remove(r.inst)
	}
	delete(a.insts, id)
	delete(a.published, id)
}

// env returns the transition environment of an instance.
func (a *App) envLocked(group string) domain.Env {
	env := domain.Env{
		Now:       a.clock.Now(),
		Policy:    a.opts.Policy,
		NoCluster: a.cluster == nil,
		Jitter:    a.jitter(),
	}
	if g, ok := a.groups[group]; ok {
		env.Group = g.g
	}
	return env
}

// Revisions are the store revisions an operation wrote (0: none).
type Revisions struct {
	Groups    uint64
	Instances uint64
	Catalog   uint64
}

func (r *Revisions) group(rev uint64) { r.Groups = max(r.Groups, rev) }
func (r *Revisions) inst(rev uint64)  { r.Instances = max(r.Instances, rev) }

// writeGroupLocked persists g over rec with compare-and-set. On a conflict
// the cache is refreshed from the store and the conflict returned, so the
// caller can recompute and retry.
func (a *App) writeGroupLocked(ctx context.Context, rec *groupRec, g domain.NodeGroup) (uint64, error) {
	g.UpdatedAt = a.clock.Now()
	g.Applied = a.appliedForWriteLocked(ctx, rec.g.Applied)
	rev, err := a.store.UpdateGroup(ctx, g, rec.rev)
	if err != nil {
		if errors.Is(err, ports.ErrConflict) {
			a.refreshGroupLocked(ctx, g.ID)
		}
		return 0, err
	}
	a.setGroupLocked(g, rev)
	return rev, nil
}

func (a *App) refreshGroupLocked(ctx context.Context, id string) {
	v, err := a.store.GetGroup(ctx, id)
	switch {
	case errors.Is(err, ports.ErrNotFound):
		a.dropGroupLocked(id)
	case err != nil:
		a.log.Warn("refreshing group after a conflict", "group", id, "err", err)
	default:
		a.setGroupLocked(v.Group, v.Revision)
	}
}

// writeInstLocked persists in (an update of an existing record).
func (a *App) writeInstLocked(ctx context.Context, in domain.Instance) (uint64, error) {
	rec, ok := a.insts[in.ID]
	if !ok {
		return 0, fmt.Errorf("instance %s is not cached", in.ID)
	}
	rev, err := a.store.UpdateInstance(ctx, in, rec.rev)
	if err != nil {
		if errors.Is(err, ports.ErrConflict) {
			a.refreshInstLocked(ctx, in.Group, in.ID)
		}
		return 0, fmt.Errorf("writing instance %s: %w", in.ID, err)
	}
	a.setInstLocked(in, rev)
	return rev, nil
}

func (a *App) refreshInstLocked(ctx context.Context, group, id string) {
	v, err := a.store.GetInstance(ctx, group, id)
	switch {
	case errors.Is(err, ports.ErrNotFound):
		a.dropInstLocked(id)
	case err != nil:
		a.log.Warn("refreshing instance after a conflict", "instance", id, "err", err)
	default:
		a.setInstLocked(v.Instance, v.Revision)
	}
}

// createInstLocked creates a new Pending record for group.
func (a *App) createInstLocked(ctx context.Context, group string) (domain.Instance, uint64, error) {
	var lastErr error
	for range 3 {
		in := domain.NewInstance(domain.NewInstanceID(group, a.random(domain.InstanceIDRandomLength)), group, a.clock.Now())
		if _, taken := a.insts[in.ID]; taken {
			continue
		}
		in.TraceContext = a.tracer.Carrier(ctx)
		rev, err := a.store.CreateInstance(ctx, in)
		if errors.Is(err, ports.ErrConflict) {
			lastErr = err // id collision with an uncached record: draw again
			continue
		}
		if err != nil {
			return domain.Instance{}, 0, fmt.Errorf("creating an instance of %s: %w", group, err)
		}
		a.setInstLocked(in, rev)
		a.noteInstanceRecordLocked(ctx)
		a.obs.Transition(group, domain.Move{From: domain.StateUnknown, To: domain.StatePending, Reason: "created", Cause: "created"})
		return in, rev, nil
	}
	return domain.Instance{}, 0, fmt.Errorf("creating an instance of %s: no free id: %w", group, lastErr)
}

// applyLocked applies ev to a cached instance and persists the result. It
// refuses events whose result has effects (use Apply for those).
func (a *App) applyLocked(ctx context.Context, id string, ev domain.Event) (domain.Result, uint64, error) {
	rec, ok := a.insts[id]
	if !ok {
		return domain.Result{}, 0, domain.Errorf(contract.CodeNotFound, "instance %s not found", id)
	}
	res, err := domain.Apply(rec.inst, ev, a.envLocked(rec.inst.Group))
	if err != nil {
		return res, 0, err
	}
	if len(res.Effects) > 0 {
		return res, 0, fmt.Errorf("%s on %s has cluster effects; use Apply", domain.EventName(ev), id)
	}
	return a.commitLocked(ctx, rec.inst, res)
}

func (a *App) commitLocked(ctx context.Context, old domain.Instance, res domain.Result) (domain.Result, uint64, error) {
	if !res.Changed {
		return res, 0, nil
	}
	res.Instance = a.stampTraceLocked(ctx, old, res.Instance)
	rev, err := a.writeInstLocked(ctx, res.Instance)
	if err != nil {
		return res, 0, err
	}
	a.observe(ctx, old, res)
	return res, rev, nil
}

func (a *App) observe(ctx context.Context, old domain.Instance, res domain.Result) {
	in := res.Instance
	log := logging.WithTrace(ctx, a.log).With("instance", in.ID, "group", in.Group, "state", in.State.String())
	for _, m := range res.Moves {
		a.obs.Transition(in.Group, m)
		log.Info("transition", "from", m.From.String(), "to", m.To.String(), "reason", m.Reason, "attempt", in.Attempt)
	}
	switch {
	case in.NodeLost() && !old.NodeLost():
		log.Warn("node deleted from the cluster by someone else; the instance is replaced unless the node registers again",
			"node", in.Node(), "replace_at", in.Deadline)
	case old.NodeLost() && !in.NodeLost() && in.State == domain.StateRunning:
		log.Info("node registered again; the instance stays", "node", in.Node())
	}
	if res.CreationFailed {
		class := int32(0)
		if in.LastError != nil {
			class = in.LastError.Class
			log.Warn("creation failed; reported to the autoscaler until deleted or retried",
				"code", in.LastError.Code, "class", class, "error", in.LastError.Message)
		}
		a.obs.CreationFailed(in.Group, class)
	} else if in.LastError != nil && in.LastError.Code != domain.CodeNodeDeleted &&
		(old.LastError == nil || *old.LastError != *in.LastError) {
		log.Warn("step failed", "state", in.State.String(), "code", in.LastError.Code,
			"error", in.LastError.Message, "retries", in.Retries, "next_retry_at", in.NextRetryAt)
	}
	a.notifyLocked(old, res)
}

// Apply applies ev to instance id: it carries out the result's cluster
// effects first (outside the lock; they are idempotent) and then persists
// the record, re-evaluating against the current record if it changed
// meanwhile. A stale or inapplicable event returns a zero revision and a nil
// error, or an error wrapping domain.ErrInvalidTransition.
func (a *App) Apply(ctx context.Context, id string, ev domain.Event) (domain.Result, uint64, error) {
	done := map[domain.Effect]bool{}
	for range 3 {
		a.mu.Lock()
		if !a.loaded {
			a.mu.Unlock()
			return domain.Result{}, 0, ErrNotLeader
		}
		rec, ok := a.insts[id]
		if !ok {
			a.mu.Unlock()
			return domain.Result{}, 0, domain.Errorf(contract.CodeNotFound, "instance %s not found", id)
		}
		res, err := domain.Apply(rec.inst, ev, a.envLocked(rec.inst.Group))
		if err != nil || !res.Changed {
			a.mu.Unlock()
			return res, 0, err
		}
		var todo []domain.Effect
		for _, e := range res.Effects {
			if !done[e] {
				todo = append(todo, e)
			}
		}
		if len(todo) == 0 {
			res, rev, err := a.commitLocked(ctx, rec.inst, res)
			a.mu.Unlock()
			if err == nil {
				a.Wake()
			}
			return res, rev, err
		}
		group := a.groups[rec.inst.Group]
		a.mu.Unlock()
		for _, e := range todo {
			if err := a.effect(ctx, rec.inst, group, e); err != nil {
				return res, 0, err
			}
			done[e] = true
		}
	}
	return domain.Result{}, 0, domain.Errorf(contract.CodeAborted, "instance %s kept changing while applying %s", id, domain.EventName(ev))
}

func (a *App) effect(ctx context.Context, in domain.Instance, group *groupRec, e domain.Effect) error {
	if a.cluster == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch e.Kind {
	case domain.EffectPatchNode:
		labels := map[string]string{LabelGroup: in.Group, LabelInstance: in.ID}
		var annotations map[string]string
		var taints []ports.Taint
		if group != nil {
			for k, v := range group.g.NodeTemplate.Labels {
				labels[k] = v
			}
			annotations = group.g.NodeTemplate.Annotations
			for _, t := range group.g.NodeTemplate.Taints {
				taints = append(taints, ports.Taint(t))
			}
		}
		if err := a.cluster.PatchNode(ctx, e.NodeName, labels, annotations, taints); err != nil {
			return fmt.Errorf("labelling node %s: %w", e.NodeName, err)
		}
	case domain.EffectDeleteNode:
		if err := a.cluster.DeleteNode(ctx, e.NodeName); err != nil {
			return fmt.Errorf("deleting node %s: %w", e.NodeName, err)
		}
	}
	return nil
}

// Labels lifecycle puts on the Nodes it manages, besides the group's own.
const (
	LabelGroup    = "nodesmith.io/node-group"
	LabelInstance = "nodesmith.io/instance-id"
)

// HandleEvent applies a worker's result to an instance. Results for unknown
// instances and results that make no sense in the instance's state are
// logged and dropped (returning nil acks them); an error means the result
// should be redelivered (storage trouble, a concurrent write).
func (a *App) HandleEvent(ctx context.Context, instanceID string, ev domain.Event) error {
	res, _, err := a.Apply(ctx, instanceID, ev)
	log := logging.WithTrace(ctx, a.log).With("instance", instanceID, "event", domain.EventName(ev))
	switch {
	case err == nil:
		if !res.Changed {
			log.Debug("event changed nothing", "why", res.Ignored)
		}
		return nil
	case domain.CodeOf(err) == contract.CodeNotFound:
		log.Info("event for an unknown instance dropped")
		return nil
	case errors.Is(err, domain.ErrInvalidTransition):
		log.Warn("event dropped", "err", err)
		return nil
	}
	return err
}
