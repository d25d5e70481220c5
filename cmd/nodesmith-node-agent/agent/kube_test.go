package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodesmith/nodesmith/cmd/nodesmith-node-agent/agent"
	"github.com/nodesmith/nodesmith/libs/command"
	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/libs/health"
	"github.com/nodesmith/nodesmith/libs/logging"
	"github.com/nodesmith/nodesmith/libs/logging/logtest"
	"github.com/nodesmith/nodesmith/libs/metrics/metricstest"
	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
	"github.com/nodesmith/nodesmith/tools/kube/manifests"
)

// metadataServer behaves like Tencent's termination-time URL: 404 until a
// reclaim is scheduled, then the time. answer can be changed at any time
// (garbage, a 5xx) and requests are counted.
type metadataServer struct {
	*httptest.Server
	requests atomic.Int64
	mu       sync.Mutex
	status   int
	body     string
}

func newMetadataServer(t *testing.T) *metadataServer {
	m := &metadataServer{status: http.StatusNotFound}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/latest/meta-data/spot/termination-time" {
			http.NotFound(w, r)
			return
		}
		m.mu.Lock()
		status, body := m.status, m.body
		m.mu.Unlock()
		m.requests.Add(1)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *metadataServer) answer(status int, body string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status, m.body = status, body
}

func (m *metadataServer) termURL() string { return m.URL + "/latest/meta-data/spot/termination-time" }

// waitPolls waits until the server has answered n more requests.
func (m *metadataServer) waitPolls(t *testing.T, n int64) {
	t.Helper()
	target := m.requests.Load() + n
	eventually(t, fmt.Sprintf("%d more metadata requests", n), func() bool { return m.requests.Load() >= target })
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// running is one agent process in the test.
type running struct {
	reg    *prometheus.Registry
	logs   *logtest.Buffer
	addr   string
	cancel context.CancelFunc
	done   chan error
}

func (r *running) metric(t *testing.T, name string, labels map[string]string) float64 {
	return metricstest.Value(t, r.reg, name, labels)
}

// stop ends the agent and returns Run's error; it fails the test when Run
// does not return promptly.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for a second stop (Cleanup)
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("the agent did not stop within 15s of its context ending")
		return nil
	}
}

func start(t *testing.T, cfg agent.Config, restCfg *rest.Config) *running {
	t.Helper()
	r := &running{reg: prometheus.NewRegistry(), logs: &logtest.Buffer{}, done: make(chan error, 1)}
	log, err := logging.New(logging.Options{Writer: r.logs, Level: "debug"})
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		r.done <- agent.Run(ctx, cfg, agent.Deps{
			Host:       command.Host{Logger: log, Registry: r.reg, Health: &health.Checks{}},
			RESTConfig: restCfg,
			Ready:      func(addr string) { ready <- addr },
		})
	}()
	select {
	case r.addr = <-ready:
	case err := <-r.done:
		t.Fatalf("the agent stopped at start: %v", err)
	}
	t.Cleanup(func() {
		_ = r.stop(t)
		if t.Failed() {
			t.Logf("agent logs:\n%s", r.logs.String())
		}
	})
	return r
}

// Tests against a real kube-apiserver, as the node-agent ServiceAccount
// with the RBAC the kustomize base renders (what the DaemonSet's pods get).
func TestKubernetes(t *testing.T) {
	c := kubetest.Start(t) // skips under -short
	admin := c.Clientset(t)
	ns := c.Namespace(t)
	objs, err := manifests.Render(filepath.Join("..", "..", "..", "deploy", "kustomize", "base"))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.ApplyRBAC(t.Context(), manifests.NewSet(objs).OfApp("node-agent"), ns); err != nil || n == 0 {
		t.Fatalf("applying the node-agent RBAC of the kustomize base: %d objects, %v", n, err)
	}
	kubeconfig, err := c.ServiceAccountKubeconfig(t.Context(), ns, "node-agent", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	saConfig := c.ServiceAccountConfig(t, ns, "node-agent")

	var nodes atomic.Int64
	newNode := func(t *testing.T) string {
		name := fmt.Sprintf("spot-%d", nodes.Add(1))
		_, err := admin.CoreV1().Nodes().Create(t.Context(), &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{contract.LabelCapacityType: contract.CapacityTypeSpot}},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "batch", Effect: corev1.TaintEffectNoSchedule}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return name
	}
	config := func(node string, md *metadataServer) agent.Config {
		cfg := agent.DefaultConfig()
		cfg.NodeName = node
		cfg.MetadataURL = md.termURL()
		cfg.Kubeconfig = kubeconfig
		cfg.Interval = 20 * time.Millisecond
		cfg.RequestTimeout = 5 * time.Second // longer than any test
		cfg.HealthAddr = "127.0.0.1:0"
		return cfg
	}

	t.Run("no notice: the Node is left alone and the agent is ready", func(t *testing.T) {
		node, md := newNode(t), newMetadataServer(t)
		before := getNode(t, admin, node)
		r := start(t, config(node, md), nil) // --kubeconfig
		md.waitPolls(t, 10)
		after := getNode(t, admin, node)
		if after.ResourceVersion != before.ResourceVersion || spotTaint(after) != nil {
			t.Fatalf("the Node changed without a notice: %+v", after.Spec.Taints)
		}
		eventually(t, "polls{none} >= 10", func() bool {
			return r.metric(t, "nodesmith_node_agent_polls_total", map[string]string{"result": "none"}) >= 10
		})
		for _, path := range []string{"/livez", "/readyz", "/metrics"} {
			if code, body := httpGet(t, "http://"+r.addr+path); code != http.StatusOK {
				t.Errorf("%s: %d %s", path, code, body)
			}
		}
	})

	t.Run("a notice taints and annotates the Node once over many polls", func(t *testing.T) {
		node, md := newNode(t), newMetadataServer(t)
		r := start(t, config(node, md), nil)
		md.waitPolls(t, 2)
		md.answer(http.StatusOK, "2030-08-17T08:05:49Z")
		eventually(t, "the taint", func() bool { return spotTaint(getNode(t, admin, node)) != nil })
		marked := getNode(t, admin, node)
		checkMarked(t, marked, "2030-08-17T08:05:49Z", "url")
		md.waitPolls(t, 20)
		if again := getNode(t, admin, node); again.ResourceVersion != marked.ResourceVersion {
			t.Errorf("the Node was written again over 20 polls of the same notice (resourceVersion %s -> %s)", marked.ResourceVersion, again.ResourceVersion)
		}
		if got := r.metric(t, "nodesmith_node_agent_node_marks_total", map[string]string{"result": "patched"}); got != 1 {
			t.Errorf("marks{patched} = %v, want 1", got)
		}
		if got := r.metric(t, "nodesmith_node_agent_termination_time_seconds", nil); got != float64(time.Date(2030, 8, 17, 8, 5, 49, 0, time.UTC).Unix()) {
			t.Errorf("termination time gauge = %v", got)
		}
		if !strings.Contains(r.logs.String(), "spot reclaim announced") {
			t.Error("the notice was not logged")
		}

		// A restarted agent finds its Node marked and leaves it alone.
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		r2 := start(t, config(node, md), saConfig)
		eventually(t, "the restarted agent to see the mark", func() bool {
			return r2.metric(t, "nodesmith_node_agent_node_marks_total", map[string]string{"result": "unchanged"}) == 1
		})
		if again := getNode(t, admin, node); again.ResourceVersion != marked.ResourceVersion {
			t.Errorf("a restarted agent re-wrote the marked Node")
		}
	})

	t.Run("API errors are retried until the patch succeeds", func(t *testing.T) {
		node, md := newNode(t), newMetadataServer(t)
		md.answer(http.StatusOK, "2018-08-18 12:05:33") // Tencent's zone-less form
		var failed atomic.Int64
		cfg := rest.CopyConfig(saConfig)
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(req *http.Request) (*http.Response, error) {
				if req.Method == http.MethodPatch && failed.Add(1) <= 3 {
					return &http.Response{
						StatusCode: http.StatusServiceUnavailable, Request: req,
						Header: http.Header{"Content-Type": []string{"application/json"}},
						Body:   io.NopCloser(bytes.NewReader([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"ServiceUnavailable","code":503}`))),
					}, nil
				}
				return rt.RoundTrip(req)
			})
		}
		r := start(t, config(node, md), cfg)
		eventually(t, "the taint", func() bool { return spotTaint(getNode(t, admin, node)) != nil })
		checkMarked(t, getNode(t, admin, node), "2018-08-18T04:05:33Z", "url")
		if n := failed.Load(); n < 4 {
			t.Errorf("%d PATCH requests; want 3 failed and one that succeeded", n)
		}
		eventually(t, "marks{patched}", func() bool {
			return r.metric(t, "nodesmith_node_agent_node_marks_total", map[string]string{"result": "patched"}) == 1
		})
		if got := r.metric(t, "nodesmith_node_agent_node_marks_total", map[string]string{"result": "failed"}); got != 0 {
			t.Errorf("marks{failed} = %v: the retries within one poll should have sufficed", got)
		}
		if !strings.Contains(r.logs.String(), "marking the Node failed; retrying") {
			t.Error("the retries were not logged")
		}
	})

	t.Run("5xx and garbage from the metadata service are logged and ignored", func(t *testing.T) {
		node, md := newNode(t), newMetadataServer(t)
		before := getNode(t, admin, node)
		md.answer(http.StatusInternalServerError, "oops")
		r := start(t, config(node, md), saConfig)
		md.waitPolls(t, 3)
		md.answer(http.StatusOK, "tomorrow, maybe")
		md.waitPolls(t, 3)
		md.answer(http.StatusOK, "2030-08-17T08:05:49") // no zone
		md.waitPolls(t, 3)
		if after := getNode(t, admin, node); after.ResourceVersion != before.ResourceVersion {
			t.Fatalf("an invalid answer changed the Node: %+v", after.Spec.Taints)
		}
		eventually(t, "polls{invalid} >= 9", func() bool {
			return r.metric(t, "nodesmith_node_agent_polls_total", map[string]string{"result": "invalid"}) >= 9
		})
		logs := r.logs.String()
		for _, want := range []string{"ignoring an invalid metadata answer", "HTTP 500", `tomorrow, maybe`} {
			if !strings.Contains(logs, want) {
				t.Errorf("logs lack %q", want)
			}
		}
		if code, _ := httpGet(t, "http://"+r.addr+"/readyz"); code != http.StatusServiceUnavailable {
			t.Errorf("/readyz = %d without a valid answer, want 503", code)
		}
		// Still polling: a real notice now marks the Node.
		md.answer(http.StatusOK, "2030-08-17T08:05:49Z")
		eventually(t, "the taint", func() bool { return spotTaint(getNode(t, admin, node)) != nil })
	})

	t.Run("shutdown: Run returns nil and the health port closes", func(t *testing.T) {
		node, md := newNode(t), newMetadataServer(t)
		r := start(t, config(node, md), saConfig)
		md.waitPolls(t, 2)
		if err := r.stop(t); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if resp, err := http.Get("http://" + r.addr + "/livez"); err == nil {
			_ = resp.Body.Close()
			t.Error("the health server still answers after shutdown")
		}
		if !strings.Contains(r.logs.String(), "node agent stopped") {
			t.Error("no stop log")
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func getNode(t *testing.T, cs kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func spotTaint(n *corev1.Node) *corev1.Taint {
	for i, tt := range n.Spec.Taints {
		if tt.Key == contract.TaintSpotInterruption {
			return &n.Spec.Taints[i]
		}
	}
	return nil
}

func checkMarked(t *testing.T, n *corev1.Node, when, source string) {
	t.Helper()
	taint := spotTaint(n)
	if taint == nil || string(taint.Effect) != contract.TaintSpotInterruptionEffect || taint.Value != source {
		t.Errorf("taint %+v, want %s=%s:%s", taint, contract.TaintSpotInterruption, source, contract.TaintSpotInterruptionEffect)
	}
	// The taints others put on stay (the group's, and the not-ready one
	// the API server adds at registration); ours is there once.
	keys := map[string]int{}
	for _, tt := range n.Spec.Taints {
		keys[tt.Key]++
	}
	if keys["dedicated"] != 1 || keys[corev1.TaintNodeNotReady] != 1 || keys[contract.TaintSpotInterruption] != 1 {
		t.Errorf("taints %+v: want the existing ones kept and one spot taint", n.Spec.Taints)
	}
	if got := n.Annotations[contract.AnnotationSpotTerminationTime]; got != when {
		t.Errorf("termination time annotation %q, want %q", got, when)
	}
	if got := n.Annotations[contract.AnnotationSpotNoticeSource]; got != source {
		t.Errorf("source annotation %q, want %q", got, source)
	}
	if _, err := time.Parse(time.RFC3339, n.Annotations[contract.AnnotationSpotNoticeObservedAt]); err != nil {
		t.Errorf("observed-at annotation: %v", err)
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
