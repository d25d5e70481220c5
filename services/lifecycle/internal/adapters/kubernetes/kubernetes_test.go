package kubernetes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodesmith/nodesmith/libs/testwait"
	kube "github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/kubernetes"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func node(name, providerID string, ready bool) *corev1.Node {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec:       corev1.NodeSpec{ProviderID: providerID, Taints: []corev1.Taint{{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}, {Type: corev1.NodeReady, Status: status}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: "10.0.0.9"}},
			Images:     []corev1.ContainerImage{{Names: []string{"big/image:1"}, SizeBytes: 1 << 30}},
		},
	}
}

// recorder collects node events from a watch.
type recorder struct {
	mu  sync.Mutex
	evs []ports.NodeEvent
}

func (r *recorder) add(ev ports.NodeEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
}

func (r *recorder) snapshot() []ports.NodeEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ports.NodeEvent(nil), r.evs...)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 30*time.Second, what, cond)
}

func TestWatchDeliversExistingNodesThenSyncedThenChanges(t *testing.T) {
	cs := fake.NewClientset(node("a", "p-a", true), node("b", "p-b", false))
	c := kube.NewCluster(cs, quiet())
	ctx, cancel := context.WithCancel(context.Background())
	rec := &recorder{}
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx, rec.add) }()

	eventually(t, "the initial list and NodesSynced", func() bool { return len(rec.snapshot()) == 3 })
	evs := rec.snapshot()
	names := map[string]ports.Node{}
	for _, ev := range evs[:2] {
		if ev.Type != ports.NodeAdded {
			t.Errorf("initial event %s, want Added", ev.Type)
		}
		names[ev.Node.Name] = ev.Node
	}
	if evs[2].Type != ports.NodesSynced {
		t.Fatalf("third event %s, want Synced", evs[2].Type)
	}
	a := names["a"]
	if !a.Ready || names["b"].Ready || a.ProviderID != "p-a" || a.InternalIP != "10.0.0.9" ||
		len(a.Taints) != 1 || a.Taints[0].Key != "node.kubernetes.io/not-ready" || a.Labels["kubernetes.io/hostname"] != "a" {
		t.Errorf("node a mapped to %+v", a)
	}

	n := node("b", "p-b", true)
	if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node("c", "p-c", true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the changes", func() bool { return len(rec.snapshot()) == 6 })
	evs = rec.snapshot()[3:]
	want := []struct {
		typ   ports.NodeEventType
		name  string
		ready bool
	}{{ports.NodeUpdated, "b", true}, {ports.NodeDeleted, "a", true}, {ports.NodeAdded, "c", true}}
	for i, w := range want {
		if evs[i].Type != w.typ || evs[i].Node.Name != w.name || evs[i].Node.Ready != w.ready {
			t.Errorf("change %d = %s %s ready=%v, want %s %s ready=%v", i, evs[i].Type, evs[i].Node.Name, evs[i].Node.Ready, w.typ, w.name, w.ready)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Watch returned %v after ctx ended", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Watch did not return after ctx ended")
	}
}

func TestPatchNode(t *testing.T) {
	ctx := context.Background()
	n := node("n", "p", true)
	n.Labels["keep"] = "me"
	n.Annotations = map[string]string{"kept": "too"}
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "dedicated", Value: "old", Effect: corev1.TaintEffectNoSchedule})
	cs := fake.NewClientset(n)
	c := kube.NewCluster(cs, quiet())

	taints := []ports.Taint{{Key: "dedicated", Value: "new", Effect: "NoSchedule"}, {Key: "gpu", Value: "true", Effect: "NoExecute"}}
	for range 2 { // idempotent
		if err := c.PatchNode(ctx, "n", map[string]string{"role": "w"}, map[string]string{"note": "x"}, taints); err != nil {
			t.Fatal(err)
		}
	}
	got, err := cs.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels["role"] != "w" || got.Labels["keep"] != "me" || got.Annotations["note"] != "x" || got.Annotations["kept"] != "too" {
		t.Errorf("labels %v annotations %v", got.Labels, got.Annotations)
	}
	// Present by key and effect: the existing dedicated taint is kept as
	// is; the not-ready taint someone else set stays; gpu is added once.
	if len(got.Spec.Taints) != 3 || got.Spec.Taints[1].Value != "old" || got.Spec.Taints[2].Key != "gpu" {
		t.Errorf("taints %+v", got.Spec.Taints)
	}
	if err := c.PatchNode(ctx, "missing", map[string]string{"a": "b"}, nil, nil); !apierrors.IsNotFound(err) {
		t.Errorf("patching a missing node: %v, want NotFound", err)
	}
	if err := c.PatchNode(ctx, "missing", nil, nil, taints); !apierrors.IsNotFound(err) {
		t.Errorf("tainting a missing node: %v, want NotFound", err)
	}
}

// The taint patch carries the resourceVersion read: when someone else
// wrote the Node meanwhile (a conflict), it re-reads and keeps their
// change.
func TestPatchNodeTaintsRetryOnConflict(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(node("n", "p", true))
	var patches []string
	conflicts := 1
	cs.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchAction)
		patches = append(patches, string(p.GetPatch()))
		if strings.Contains(string(p.GetPatch()), `"taints"`) && conflicts > 0 {
			conflicts--
			// Someone else adds a taint before our write lands.
			n, _ := cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("nodes"), "", "n")
			other := n.(*corev1.Node).DeepCopy()
			other.Spec.Taints = append(other.Spec.Taints, corev1.Taint{Key: "theirs", Effect: corev1.TaintEffectNoSchedule})
			if err := cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), other, ""); err != nil {
				return true, nil, err
			}
			return true, nil, apierrors.NewConflict(corev1.Resource("nodes"), "n", errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	if err := kube.NewCluster(cs, quiet()).PatchNode(ctx, "n", nil, nil, []ports.Taint{{Key: "ours", Effect: "NoSchedule"}}); err != nil {
		t.Fatal(err)
	}
	if len(patches) != 2 || !strings.Contains(patches[0], `"resourceVersion"`) {
		t.Errorf("patches %q, want two with a resourceVersion precondition", patches)
	}
	got, _ := cs.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
	keys := map[string]bool{}
	for _, tt := range got.Spec.Taints {
		keys[tt.Key] = true
	}
	if !keys["ours"] || !keys["theirs"] || !keys["node.kubernetes.io/not-ready"] {
		t.Errorf("taints %+v, want ours, theirs and the original", got.Spec.Taints)
	}
}

func TestDeleteNode(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(node("n", "p", true))
	c := kube.NewCluster(cs, quiet())
	for range 2 { // missing is success
		if err := c.DeleteNode(ctx, "n"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node still there: %v", err)
	}
	cs.PrependReactor("delete", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd down")
	})
	if err := c.DeleteNode(ctx, "n"); err == nil {
		t.Errorf("a failed delete reported success")
	}
}

func TestEventsOnNodes(t *testing.T) {
	cs := fake.NewClientset()
	var dropped atomic.Int32
	e := kube.NewEvents(cs, "lifecycle-0", func() { dropped.Add(1) }, quiet())
	defer e.Stop()
	e.Notify(ports.Notice{Node: "n1", Reason: "InstanceRunning", Message: "instance i of group g is Running"})
	e.Notify(ports.Notice{Node: "n1", Warning: true, Reason: "NodeDeletedExternally", Message: "gone"})
	var list *corev1.EventList
	eventually(t, "two events", func() bool {
		list, _ = cs.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
		return len(list.Items) == 2
	})
	for _, ev := range list.Items {
		if ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.Name != "n1" || string(ev.InvolvedObject.UID) != "n1" ||
			ev.Source.Component != kube.FieldManager || ev.Namespace != metav1.NamespaceDefault {
			t.Errorf("event %+v", ev)
		}
		if ev.Reason == "NodeDeletedExternally" && ev.Type != corev1.EventTypeWarning {
			t.Errorf("warning recorded as %s", ev.Type)
		}
	}
	// A storm is cut by the rate limit, without blocking.
	start := time.Now()
	for i := range 1000 {
		e.Notify(ports.Notice{Node: fmt.Sprintf("n%d", i), Reason: "InstanceRunning", Message: "x"})
	}
	if dropped.Load() < 800 {
		t.Errorf("dropped %d of 1000 notices in %s, want most of a storm dropped", dropped.Load(), time.Since(start))
	}
}

// At 10 000 instances in 200 groups, with the 20 errors the App reports
// (or even every instance's error), the summary stays under 100 KiB.
func TestStatusIsBounded(t *testing.T) {
	var s ports.Status
	long := strings.Repeat("e", 256)
	for g := range 200 {
		s.Groups = append(s.Groups, ports.GroupStatus{ID: fmt.Sprintf("group-%03d-with-a-long-name-xxxxxxxx", g), MinSize: 0, MaxSize: 1000, TargetSize: 50,
			Instances: map[string]int{"Pending": 5, "Creating": 5, "Created": 5, "Joined": 5, "Running": 20, "PendingDeletion": 5, "Deleting": 5}, CreationFailed: 3, NodeLost: 1})
	}
	for i := range 10_000 {
		s.RecentErrors = append(s.RecentErrors, ports.InstanceError{Group: "g", Instance: fmt.Sprintf("g-%010d", i), State: "Creating", Code: "CreateTimeout", Message: long, At: time.Now()})
	}
	all := s.RecentErrors
	s.RecentErrors = all[:20]
	b, err := kube.EncodeStatus(s, "lifecycle-0_abc", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(b) > kube.MaxStatusBytes || doc["truncated"] != nil || len(doc["recentErrors"].([]any)) != 20 || len(doc["nodeGroups"].([]any)) != 200 {
		t.Errorf("%d bytes, truncated %v", len(b), doc["truncated"])
	}
	t.Logf("200 groups, 10 000 instances, 20 errors: %d bytes", len(b))
	if doc["leader"] != "lifecycle-0_abc" {
		t.Errorf("status lacks its leader")
	}

	s.RecentErrors = all
	b, err = kube.EncodeStatus(s, "lifecycle-0_abc", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > kube.MaxStatusBytes {
		t.Errorf("status is %d bytes", len(b))
	}

	// Thousands of groups: some are omitted, and the summary says so.
	for g := range 3000 {
		s.Groups = append(s.Groups, ports.GroupStatus{ID: fmt.Sprintf("more-%04d", g), Instances: map[string]int{"Running": 3}})
	}
	b, err = kube.EncodeStatus(s, "x", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	doc = nil
	_ = json.Unmarshal(b, &doc)
	if len(b) > kube.MaxStatusBytes || doc["omittedNodeGroups"] == nil {
		t.Errorf("%d bytes, omitted %v", len(b), doc["omittedNodeGroups"])
	}
}

func TestStatusConfigMapKeepsOtherKeys(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	w := kube.NewStatusConfigMap(cs, "nodesmith", "nodegroup-status", "me")
	st := ports.Status{Groups: []ports.GroupStatus{{ID: "g", MaxSize: 3, TargetSize: 1, Instances: map[string]int{"Running": 1}}}}
	if err := w.WriteStatus(ctx, st); err != nil {
		t.Fatal(err)
	}
	cm, err := cs.CoreV1().ConfigMaps("nodesmith").Get(ctx, "nodegroup-status", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["operator-note"] = "hello"
	if _, err := cs.CoreV1().ConfigMaps("nodesmith").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	st.Groups[0].TargetSize = 2
	if err := w.WriteStatus(ctx, st); err != nil {
		t.Fatal(err)
	}
	cm, _ = cs.CoreV1().ConfigMaps("nodesmith").Get(ctx, "nodegroup-status", metav1.GetOptions{})
	if cm.Data["operator-note"] != "hello" || !strings.Contains(cm.Data[kube.StatusKey], `"targetSize":2`) {
		t.Errorf("configmap data %v", cm.Data)
	}
}

// What the orphan reconciler holds back is in the summary, and only when
// there is something to say.
func TestStatusShowsHeldOrphans(t *testing.T) {
	decode := func(s ports.Status) map[string]any {
		t.Helper()
		b, err := kube.EncodeStatus(s, "me", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		return doc
	}
	if doc := decode(ports.Status{}); doc["heldOrphans"] != nil {
		t.Errorf("held orphans in a quiet summary: %v", doc["heldOrphans"])
	}
	since := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	doc := decode(ports.Status{Orphans: ports.OrphanStatus{
		Held: map[string]int{"empty_start": 2}, HoldSince: since, HoldUntil: since.Add(24 * time.Hour),
		Waiting: []string{"ins-a", "ins-b"},
	}})
	o, _ := doc["heldOrphans"].(map[string]any)
	if o == nil || o["startupHoldUntil"] != "2030-01-02T00:00:00Z" || fmt.Sprint(o["awaitingRelease"]) != "[ins-a ins-b]" ||
		fmt.Sprint(o["count"]) != "map[empty_start:2]" {
		t.Errorf("held orphans %v", doc["heldOrphans"])
	}
}

func TestDerivedClusterID(t *testing.T) {
	cs := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system", UID: "6f1c1e0a-8a57-4d5e-9b55-0e6f2a3c4d5e"}})
	id, err := kube.DerivedClusterID(context.Background(), cs)
	if err != nil || id != "k8s-6f1c1e0a-8a57-4d5e-9b55-0e6f2a3c4d5e" {
		t.Fatalf("DerivedClusterID = %q, %v", id, err)
	}
	if domain.ValidName(id) != "" {
		t.Errorf("derived id %q is not a valid cluster id: %s", id, domain.ValidName(id))
	}
	if _, err := kube.DerivedClusterID(context.Background(), fake.NewClientset()); err == nil || !strings.Contains(err.Error(), "kube-system") {
		t.Errorf("without kube-system: %v", err)
	}
}
