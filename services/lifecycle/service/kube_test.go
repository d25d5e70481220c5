package service_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/nodesmith/nodesmith/libs/metrics/metricstest"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	hookv1 "github.com/nodesmith/nodesmith/proto/nodesmith/hook/v1"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/natskv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/fakeworkers"
	"github.com/nodesmith/nodesmith/services/lifecycle/service"
	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
	"github.com/nodesmith/nodesmith/tools/kube/manifests"
)

// Acceptance tests against a real kube-apiserver (tools/kube/kubetest),
// as the lifecycle ServiceAccount with the kustomize base's RBAC: what a
// pod would be allowed to do, nothing more.
func TestKubernetes(t *testing.T) {
	c := kubetest.Start(t) // skips under -short
	admin := c.Clientset(t)
	t.Run("a registering node becomes Running and gets the group's labels and taints despite concurrent writers", func(t *testing.T) {
		testNodeJoins(t, c, admin)
	})
	t.Run("leader hand-over between two processes loses and doubles no work", func(t *testing.T) {
		testLeaderHandOver(t, c, admin)
	})
}

// kubeEnv is one namespace with lifecycle's RBAC and a kubeconfig for its
// ServiceAccount.
type kubeEnv struct {
	ns         string
	kubeconfig string
	admin      kubernetes.Interface
}

func newKubeEnv(t *testing.T, c *kubetest.Cluster, admin kubernetes.Interface) kubeEnv {
	t.Helper()
	ns := c.Namespace(t)
	// lifecycle's RBAC as the kustomize base renders it (what a
	// deployment gets, not a copy that could drift), moved to ns.
	objs, err := manifests.Render(filepath.Join("..", "..", "..", "deploy", "kustomize", "base"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.ApplyRBAC(t.Context(), manifests.NewSet(objs).OfApp("lifecycle"), ns)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("the kustomize base has no RBAC objects labelled app.kubernetes.io/name=lifecycle")
	}
	kubeconfig, err := c.ServiceAccountKubeconfig(t.Context(), ns, "lifecycle", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return kubeEnv{ns: ns, kubeconfig: kubeconfig, admin: admin}
}

func kubeConfig(env kubeEnv, identity string) service.Config {
	cfg := fastConfig(testConfig)
	cfg.Cluster = service.ClusterKubernetes
	cfg.Kubeconfig = env.kubeconfig
	cfg.Namespace = env.ns
	cfg.LeaderElectIdentity = identity
	cfg.LeaderElectLeaseDuration = 6 * time.Second
	cfg.LeaderElectRenewDeadline = 4 * time.Second
	cfg.LeaderElectRetryPeriod = time.Second
	cfg.StatusInterval = 200 * time.Millisecond
	return cfg
}

// registerNode plays kubelet for an instance whose after_created hook ran:
// the Node registers with the providerID the hook was given, then reports
// Ready.
func registerNode(t *testing.T, cs kubernetes.Interface, r *hookv1.RunHook) {
	if r.GetHook() != hookv1.HookKind_HOOK_KIND_AFTER_CREATED {
		return
	}
	ctx := context.Background()
	name := r.GetEnv()["NODE_NAME"]
	n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec: corev1.NodeSpec{ProviderID: r.GetEnv()["PROVIDER_ID"],
			Taints: []corev1.Taint{{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}}},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return
	}
	if err != nil {
		t.Errorf("registering node %s: %v", name, err)
		return
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: r.GetEnv()["NODE_IP"]}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Errorf("node %s Ready: %v", name, err)
	}
}

// kubeletWriter plays a kubelet and another controller writing a Node
// while lifecycle patches it: status heartbeats, a label and a taint of
// its own (full updates with the resourceVersion read, as kubelet does).
func kubeletWriter(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	for i := 0; ctx.Err() == nil; i++ {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for j := range n.Status.Conditions {
				n.Status.Conditions[j].LastHeartbeatTime = metav1.Now()
			}
			if n, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
				return err
			}
			n.Labels["kubelet-heartbeat"] = fmt.Sprint(i)
			has := false
			for _, tt := range n.Spec.Taints {
				has = has || tt.Key == "theirs"
			}
			if !has {
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "theirs", Value: "x", Effect: corev1.TaintEffectPreferNoSchedule})
			}
			_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) {
			t.Errorf("concurrent writer of node %s: %v", name, err)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testNodeJoins(t *testing.T, c *kubetest.Cluster, admin kubernetes.Interface) {
	env := newKubeEnv(t, c, admin)
	ctx := context.Background()

	// The concurrent writer starts as soon as the Node registers, before
	// lifecycle sees it Ready and patches it.
	wctx, stopWriters := context.WithCancel(ctx)
	var writers sync.WaitGroup
	defer func() { stopWriters(); writers.Wait() }()
	onNode := func(r *hookv1.RunHook) {
		registerNode(t, admin, r)
		if r.GetHook() == hookv1.HookKind_HOOK_KIND_AFTER_CREATED {
			writers.Add(1)
			go func() { defer writers.Done(); kubeletWriter(wctx, t, admin, r.GetEnv()["NODE_NAME"]) }()
		}
	}

	s := newStack(t, kubeConfig(env, "lifecycle-0"), service.Deps{})
	s.workers.Hooks.Set(func(h *fakeworkers.Hooks) { h.OnSuccess = onNode })
	mustOK(t, s.increase("workers", 2))
	eventually(t, "2 Running", func() bool { return countIn(s.instances("workers"), domain.StateRunning) == 2 })
	// Let the writers race with lifecycle's patches a little more.
	time.Sleep(200 * time.Millisecond)
	stopWriters()
	writers.Wait()

	// No --cluster-id: the VMs carry one derived from the cluster (the
	// uid of kube-system, readable with the base's RBAC), never a
	// constant another cluster could share.
	sys, err := admin.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range s.workers.Cloud.VMs() {
		if want := "k8s-" + string(sys.UID); vm.Cluster != want {
			t.Errorf("VM %s carries cluster id %q, want %q", vm.CloudID, vm.Cluster, want)
		}
	}

	for _, in := range s.instances("workers") {
		n, err := admin.CoreV1().Nodes().Get(ctx, in.Node(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels["role"] != "worker" || n.Labels["nodesmith.io/node-group"] != "workers" || n.Labels["nodesmith.io/instance-id"] != in.ID {
			t.Errorf("node %s labels %v", n.Name, n.Labels)
		}
		if n.Labels["kubelet-heartbeat"] == "" {
			t.Errorf("node %s lost the concurrent writer's label: %v", n.Name, n.Labels)
		}
		taints := map[string]string{}
		for _, tt := range n.Spec.Taints {
			taints[tt.Key] = tt.Value + ":" + string(tt.Effect)
		}
		if taints["dedicated"] != "workers:NoSchedule" || taints["theirs"] != "x:PreferNoSchedule" {
			t.Errorf("node %s taints %v: want the group's and the concurrent writer's", n.Name, taints)
		}
	}

	// Events on the Nodes (in "default", the only namespace the API server
	// accepts them in), the status ConfigMap and the Lease (in the
	// namespace).
	running := s.instances("workers")[0]
	eventually(t, "an InstanceRunning event on the node", func() bool {
		evs, err := admin.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs.Items {
			if ev.Reason == "InstanceRunning" && ev.InvolvedObject.Kind == "Node" && ev.InvolvedObject.Name == running.Node() {
				return true
			}
		}
		return false
	})
	eventually(t, "the status ConfigMap", func() bool {
		cm, err := admin.CoreV1().ConfigMaps(env.ns).Get(ctx, "nodegroup-status", metav1.GetOptions{})
		return err == nil && strings.Contains(cm.Data["status.json"], `"id":"workers"`) &&
			strings.Contains(cm.Data["status.json"], `"Running":2`)
	})
	lease, err := admin.CoordinationV1().Leases(env.ns).Get(ctx, "nodesmith-lifecycle", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "lifecycle-0" {
		t.Errorf("lease %+v: %v", lease.Spec, err)
	}

	// Scale-down deletes the Node object after the VM.
	mustOK(t, s.deleteNodes("workers", running.ProviderID))
	eventually(t, "the node deleted", func() bool {
		_, err := admin.CoreV1().Nodes().Get(ctx, running.Node(), metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func testLeaderHandOver(t *testing.T, c *kubetest.Cluster, admin kubernetes.Interface) {
	env := newKubeEnv(t, c, admin)
	ctx := context.Background()
	nats := natstest.Start(t)

	// One set of workers (one simulated cloud) for both processes.
	_, wjs := nats.ConnectAdmin(t) // the fake workers play both workers
	workers := fakeworkers.New(wjs, nil)
	workers.Cloud.Set(func(c *fakeworkers.Cloud) { c.Latency = 50 * time.Millisecond })
	workers.Hooks.Set(func(h *fakeworkers.Hooks) {
		h.Latency = 50 * time.Millisecond
		h.OnSuccess = func(r *hookv1.RunHook) { registerNode(t, admin, r) }
	})
	wctx, wcancel := context.WithCancel(ctx)
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		if err := workers.Run(wctx); err != nil {
			t.Errorf("fake workers: %v", err)
		}
	}()
	t.Cleanup(func() { wcancel(); <-wdone })

	a := startProcess(t, nats, kubeConfig(env, "lifecycle-a"))
	eventually(t, "a leads", func() bool { return a.leading(t) })
	b := startProcess(t, nats, kubeConfig(env, "lifecycle-b"))
	// b is a healthy follower: it neither leads nor answers operations.
	probe := &stack{t: t, env: nats, store: openStore(t, nats)}
	probe.ops, _ = nats.ConnectAs(t, natsauth.APIGateway)
	mustOK(t, probe.increase("workers", 4))
	eventually(t, "scale-up under way", func() bool {
		for _, in := range probe.instances("") {
			if in.State >= domain.StateCreated {
				return true
			}
		}
		return false
	})
	if b.leading(t) {
		t.Fatal("b leads while a holds the lease")
	}
	// Its only subscription is the JetStream API's reply inbox: no
	// operations, no results consumer.
	if n := b.nc.NumSubscriptions(); n > 1 {
		t.Errorf("the follower has %d NATS subscriptions, want at most the JetStream reply inbox", n)
	}
	if n := a.nc.NumSubscriptions(); n < 2 {
		t.Errorf("the leader has %d NATS subscriptions, want operations and results too", n)
	}

	// a stops in the middle of the scale-up: it drains and releases the
	// lease, b takes over and finishes the work.
	// The hand-over is quick because a releases the Lease as it stops
	// rather than leaving b to wait out the lease duration: once stop has
	// returned, the Lease no longer names a (it is empty, or b's already).
	a.stop(t)
	holder := func() (string, error) {
		l, err := admin.CoordinationV1().Leases(env.ns).Get(ctx, "nodesmith-lifecycle", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return "", err
		}
		return *l.Spec.HolderIdentity, nil
	}
	if h, err := holder(); err != nil || h == "lifecycle-a" {
		t.Errorf("a stopped and the Lease names %q (%v): not released, b must wait out the lease duration", h, err)
	}
	eventually(t, "b holds the lease", func() bool { h, err := holder(); return err == nil && h == "lifecycle-b" })
	eventually(t, "b leads", func() bool { return b.leading(t) })
	mustOK(t, probe.increase("workers", 1)) // answered by b
	eventually(t, "5 Running", func() bool { return countIn(probe.instances(""), domain.StateRunning) == 5 })

	// No work lost: 5 live instances, all Running with a Node. None
	// doubled: one VM per instance, no other record.
	is := probe.instances("")
	if len(is) != 5 {
		t.Errorf("records %s, want 5", summary(is))
	}
	if vms := workers.Cloud.VMs(); len(vms) != 5 {
		t.Errorf("VMs %d, want 5 (one per instance)", len(vms))
	}
	for _, in := range is {
		if _, err := admin.CoreV1().Nodes().Get(ctx, in.Node(), metav1.GetOptions{}); err != nil {
			t.Errorf("node of %s: %v", in.ID, err)
		}
	}
	if g := probe.group("workers"); g.TargetSize != 5 {
		t.Errorf("target %d, want 5", g.TargetSize)
	}
}

// process is one lifecycle service on its own NATS connection and metrics.
type process struct {
	nc     *nats.Conn
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

func startProcess(t *testing.T, env *natstest.Env, cfg service.Config) *process {
	t.Helper()
	nc, _ := env.Connect(t)
	p := &process{nc: nc, reg: prometheus.NewRegistry(), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go func() {
		p.done <- service.Run(ctx, cfg, service.Deps{Conn: nc, Registry: p.reg, Logger: testLogger(t).With("identity", cfg.LeaderElectIdentity)})
	}()
	t.Cleanup(func() { p.stop(t) })
	return p
}

func (p *process) leading(t *testing.T) bool {
	t.Helper()
	return metricstest.Value(t, p.reg, "nodesmith_lifecycle_leader", nil) == 1
}

func (p *process) stop(t *testing.T) {
	t.Helper()
	if p.cancel == nil {
		return
	}
	p.cancel()
	p.cancel = nil
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("service.Run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("service did not stop")
	}
}

func openStore(t *testing.T, env *natstest.Env) *natskv.Store {
	t.Helper()
	store, err := natskv.Open(context.Background(), env.JS)
	if err != nil {
		t.Fatal(err)
	}
	return store
}
