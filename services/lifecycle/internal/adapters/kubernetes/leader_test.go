package kubernetes_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	kube "github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/kubernetes"
)

func leaderOpts(identity string, lease time.Duration) kube.LeaderOptions {
	o := kube.DefaultLeaderOptions()
	o.Namespace, o.Identity = "nodesmith", identity
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = lease, lease/2, 100*time.Millisecond
	return o
}

// contender runs one Leader and records its terms.
type contender struct {
	name    string
	leader  *kube.Leader
	cancel  context.CancelFunc
	done    chan error
	leading atomic.Bool
	terms   atomic.Int32
}

// active counts leaders running lead at once, across contenders.
type active struct {
	n, max atomic.Int32
}

func startContender(t *testing.T, cs kubernetes.Interface, name string, lease time.Duration, act *active, drain time.Duration) *contender {
	t.Helper()
	l, err := kube.NewLeader(cs, leaderOpts(name, lease), quiet())
	if err != nil {
		t.Fatal(err)
	}
	c := &contender{name: name, leader: l, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		c.done <- l.Run(ctx, func(ctx context.Context) error {
			if n := act.n.Add(1); n > act.max.Load() {
				act.max.Store(n)
			}
			c.terms.Add(1)
			c.leading.Store(true)
			<-ctx.Done()
			time.Sleep(drain) // in-flight work drains before the lease is released
			c.leading.Store(false)
			act.n.Add(-1)
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			t.Errorf("%s: Run did not return", name)
		}
	})
	return c
}

// Cancelling the leader's context hands over to the follower as soon as
// the leader has drained: the lease is released, so the follower does not
// wait for it to expire. Never are two leaders active at once.
func TestLeaderHandsOverOnCancel(t *testing.T) {
	cs := fake.NewClientset()
	// Every holder the Lease is written with, in order: a release shows as
	// an empty holder between a and b.
	var holdersMu sync.Mutex
	var holders []string
	cs.PrependReactor("*", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		w, ok := action.(interface{ GetObject() runtime.Object }) // create or update
		if !ok {
			return false, nil, nil
		}
		if l, ok := w.GetObject().(*coordinationv1.Lease); ok {
			h := ""
			if l.Spec.HolderIdentity != nil {
				h = *l.Spec.HolderIdentity
			}
			holdersMu.Lock()
			if len(holders) == 0 || holders[len(holders)-1] != h {
				holders = append(holders, h)
			}
			holdersMu.Unlock()
		}
		return false, nil, nil
	})
	const lease = 10 * time.Second // long: a hand-over by expiry would show
	var act active
	a := startContender(t, cs, "a", lease, &act, 300*time.Millisecond)
	eventually(t, "a leads", a.leading.Load)
	b := startContender(t, cs, "b", lease, &act, 0)
	eventually(t, "b observes a", func() bool { return b.leader.Check(context.Background()) == nil })
	if b.leading.Load() {
		t.Fatal("b leads while a holds the lease")
	}

	a.cancel()
	select {
	case err := <-a.done:
		if err != nil {
			t.Fatalf("a.Run: %v", err)
		}
		a.done <- nil // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("a did not stop")
	}
	eventually(t, "b leads", b.leading.Load)
	// The hand-over came by release, not by expiry: a wrote the Lease with
	// no holder after draining, before b took it.
	holdersMu.Lock()
	got := slices.Clone(holders)
	holdersMu.Unlock()
	if want := []string{"a", "", "b"}; !slices.Equal(got, want) {
		t.Errorf("Lease holders over time %q, want %q: a did not release the lease", got, want)
	}
	if act.max.Load() != 1 {
		t.Errorf("%d leaders were active at once", act.max.Load())
	}
	lease2, err := cs.CoordinationV1().Leases("nodesmith").Get(context.Background(), "nodesmith-lifecycle", metav1.GetOptions{})
	if err != nil || lease2.Spec.HolderIdentity == nil || *lease2.Spec.HolderIdentity != "b" {
		t.Errorf("lease holder %v (%v), want b", lease2.Spec.HolderIdentity, err)
	}
}

// A lead that fails gives the lease up and campaigns again.
func TestLeaderCampaignsAgainAfterLeadFails(t *testing.T) {
	cs := fake.NewClientset()
	l, err := kube.NewLeader(cs, leaderOpts("a", 2*time.Second), quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var terms atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- l.Run(ctx, func(ctx context.Context) error {
			if terms.Add(1) == 1 {
				return errors.New("loading state failed")
			}
			<-ctx.Done()
			return nil
		})
	}()
	eventually(t, "a second term", func() bool { return terms.Load() == 2 && l.IsLeader() })
	if err := l.Check(ctx); err != nil {
		t.Errorf("a renewing leader is unhealthy: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// A follower that cannot read the lease becomes unhealthy; so does a
// leader that cannot renew it (it also stops leading).
func TestLeaderHealth(t *testing.T) {
	cs := fake.NewClientset()
	var broken atomic.Bool
	cs.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if broken.Load() {
			return true, nil, apierrors.NewServiceUnavailable("apiserver down")
		}
		return false, nil, nil
	})
	var act active
	const lease = 600 * time.Millisecond
	a := startContender(t, cs, "a", lease, &act, 0)
	eventually(t, "a leads", a.leading.Load)
	b := startContender(t, cs, "b", lease, &act, 0)
	eventually(t, "both healthy", func() bool {
		return a.leader.Check(context.Background()) == nil && b.leader.Check(context.Background()) == nil
	})
	broken.Store(true)
	eventually(t, "a steps down", func() bool { return !a.leading.Load() })
	eventually(t, "the follower unhealthy", func() bool { return b.leader.Check(context.Background()) != nil })
	broken.Store(false)
	eventually(t, "someone leads again", func() bool { return a.leading.Load() || b.leading.Load() })
	eventually(t, "healthy again", func() bool {
		return a.leader.Check(context.Background()) == nil && b.leader.Check(context.Background()) == nil
	})
	if act.max.Load() != 1 {
		t.Errorf("%d leaders were active at once", act.max.Load())
	}
}

func TestLeaderOptionsValidate(t *testing.T) {
	o := leaderOpts("x", 15*time.Second)
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	o.RenewDeadline = o.LeaseDuration
	if o.Validate() == nil {
		t.Error("renew deadline == lease duration accepted")
	}
	o = leaderOpts("", 15*time.Second)
	if o.Validate() == nil {
		t.Error("empty identity accepted")
	}
}
