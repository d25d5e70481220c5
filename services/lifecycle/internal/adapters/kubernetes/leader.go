package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

var _ ports.Leader = (*Leader)(nil)

// LeaderOptions configure leader election.
type LeaderOptions struct {
	// Namespace and Name of the Lease.
	Namespace, Name string
	// Identity of this process in the Lease (see DefaultIdentity).
	Identity string
	// LeaseDuration is how long followers wait after the last renewal
	// before taking over; RenewDeadline how long the leader keeps trying
	// to renew before it steps down; RetryPeriod how often both try.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// OnLeading, when set, is called with true when this process starts
	// leading and false when it stops (metrics).
	OnLeading func(bool)
}

// DefaultLeaderOptions are client-go's (and kube-controller-manager's)
// defaults.
func DefaultLeaderOptions() LeaderOptions {
	return LeaderOptions{
		Name:          "nodesmith-lifecycle",
		LeaseDuration: 15 * time.Second,
		RenewDeadline: 10 * time.Second,
		RetryPeriod:   2 * time.Second,
	}
}

// Validate reports every invalid option.
func (o LeaderOptions) Validate() error {
	var errs []error
	if o.Namespace == "" || o.Name == "" || o.Identity == "" {
		errs = append(errs, fmt.Errorf("leader election needs a namespace, a lease name and an identity (got %q, %q, %q)", o.Namespace, o.Name, o.Identity))
	}
	if o.RetryPeriod <= 0 || o.RenewDeadline <= o.RetryPeriod || o.LeaseDuration <= o.RenewDeadline {
		errs = append(errs, fmt.Errorf("leader election needs 0 < retry period (%s) < renew deadline (%s) < lease duration (%s)",
			o.RetryPeriod, o.RenewDeadline, o.LeaseDuration))
	}
	return errors.Join(errs...)
}

// Leader implements ports.Leader with client-go's leader election on a
// coordination.k8s.io Lease.
//
// Hand-over: when the process stops (its context ends) while leading, lead
// is asked to stop and the Lease is released only after lead returned (it
// drains in-flight work first), so a follower takes over at its next retry
// instead of waiting for the Lease to expire, and never while the old
// leader still works. When the Lease is lost (no renewal within the renew
// deadline), lead's context is cancelled and the process campaigns again
// once lead returned.
type Leader struct {
	opts   LeaderOptions
	client kubernetes.Interface
	log    *slog.Logger
	lock   *observedLock

	mu      sync.Mutex
	elector *leaderelection.LeaderElector
}

// NewLeader returns a Leader; opts must be valid.
func NewLeader(client kubernetes.Interface, opts LeaderOptions, log *slog.Logger) (*Leader, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	l := &Leader{opts: opts, client: client, log: log.With("lease", opts.Namespace+"/"+opts.Name, "identity", opts.Identity)}
	l.lock = &observedLock{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: opts.Namespace, Name: opts.Name},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: opts.Identity},
	}, since: time.Now()}
	return l, nil
}

// Run implements ports.Leader.
func (l *Leader) Run(ctx context.Context, lead func(ctx context.Context) error) error {
	backoff := time.Second
	for {
		failed, err := l.term(ctx, lead)
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		default:
		}
		wait := time.Duration(0)
		if failed {
			// lead itself failed (it was logged): campaign again after a
			// pause, so a persistent failure does not spin.
			wait = backoff
			backoff = min(2*backoff, time.Minute)
		} else {
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// term campaigns once: it returns when this process stopped leading (or ctx
// ended while campaigning). failed reports that lead returned an error.
func (l *Leader) term(ctx context.Context, lead func(ctx context.Context) error) (failed bool, err error) {
	// The elector's context outlives ctx while leading: the Lease must be
	// released only after lead has drained.
	ectx, release := context.WithCancel(context.WithoutCancel(ctx))
	defer release()
	var (
		mu       sync.Mutex
		leading  bool
		stopping bool
		leadDone = make(chan struct{})
	)
	stopCampaign := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		stopping = true
		if !leading {
			release()
		}
	})
	defer stopCampaign()

	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            l.lock,
		LeaseDuration:   l.opts.LeaseDuration,
		RenewDeadline:   l.opts.RenewDeadline,
		RetryPeriod:     l.opts.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            l.opts.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				defer close(leadDone)
				defer release() // give the Lease up once lead is done
				mu.Lock()
				leading = true
				stop := stopping
				mu.Unlock()
				if stop {
					return
				}
				// Leading ends when the Lease is lost (lctx) or the
				// process stops (ctx).
				runCtx, cancel := context.WithCancel(lctx)
				defer cancel()
				unlink := context.AfterFunc(ctx, cancel)
				defer unlink()
				l.log.Info("leading")
				l.setLeading(true)
				defer l.setLeading(false)
				if err := lead(runCtx); err != nil && runCtx.Err() == nil {
					failed = true
					l.log.Error("leading failed; giving up the lease", "err", err)
				}
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(identity string) {
				if identity != l.opts.Identity {
					l.log.Info("following", "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return false, fmt.Errorf("leader election: %w", err)
	}
	l.mu.Lock()
	l.elector = le
	l.mu.Unlock()
	le.Run(ectx)
	mu.Lock()
	started := leading
	mu.Unlock()
	if started {
		// Run returns as soon as renewal stops; lead may still be draining.
		<-leadDone
		l.log.Info("stopped leading")
	}
	return failed, nil
}

func (l *Leader) setLeading(v bool) {
	if l.opts.OnLeading != nil {
		l.opts.OnLeading(v)
	}
}

// IsLeader reports whether this process holds the Lease.
func (l *Leader) IsLeader() bool {
	l.mu.Lock()
	le := l.elector
	l.mu.Unlock()
	return le != nil && le.IsLeader()
}

// Check is the readiness check of leader election: a leader is healthy
// while its renewals are current (the last one no longer ago than the lease
// duration plus the renew deadline: past that it should have stepped down);
// a follower while it reaches the API server (its last successful read of
// the Lease is recent).
func (l *Leader) Check(context.Context) error {
	// Not client-go's LeaderElector.Check: it reads the observed time
	// without its lock (a data race under a concurrent renewal).
	if l.IsLeader() {
		if since := time.Since(l.lock.lastWrite()); since > l.opts.LeaseDuration+l.opts.RenewDeadline {
			return l.unhealthy("renewed", since)
		}
		return nil
	}
	if since := time.Since(l.lock.lastRead()); since > 2*l.opts.LeaseDuration+l.opts.RetryPeriod {
		return l.unhealthy("read", since)
	}
	return nil
}

func (l *Leader) unhealthy(what string, since time.Duration) error {
	err := fmt.Errorf("leader election: the Lease %s/%s has not been %s for %s", l.opts.Namespace, l.opts.Name, what, since.Round(time.Second))
	if last := l.lock.lastError(); last != nil {
		err = fmt.Errorf("%w: %w", err, last)
	}
	return err
}

// observedLock records when the Lease was last read and written
// successfully, for the health check.
type observedLock struct {
	resourcelock.Interface
	mu    sync.Mutex
	since time.Time // creation: the reference before any success
	read  time.Time
	write time.Time
	err   error
}

func (o *observedLock) observe(err error, write bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.err = err
	if err != nil {
		return
	}
	o.read = time.Now()
	if write {
		o.write = o.read
	}
}

func (o *observedLock) lastRead() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return latest(o.since, o.read)
}

func (o *observedLock) lastWrite() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return latest(o.since, o.write)
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (o *observedLock) lastError() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// Get implements resourcelock.Interface.
func (o *observedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	r, b, err := o.Interface.Get(ctx)
	// NotFound is a successful read of "no Lease yet".
	if isNotFound(err) {
		o.observe(nil, false)
	} else {
		o.observe(err, false)
	}
	return r, b, err
}

// Create implements resourcelock.Interface.
func (o *observedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := o.Interface.Create(ctx, r)
	o.observe(err, true)
	return err
}

// Update implements resourcelock.Interface.
func (o *observedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := o.Interface.Update(ctx, r)
	o.observe(err, true)
	return err
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
