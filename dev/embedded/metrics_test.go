package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/promql/parser"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/yaml"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// captureComponents records the components (and so the services' real
// registries) of the stacks this test starts.
func captureComponents(t *testing.T) func() map[string]*component {
	t.Helper()
	var comps map[string]*component
	componentsHook = func(c map[string]*component) { comps = c }
	t.Cleanup(func() { componentsHook = nil })
	return func() map[string]*component { return comps }
}

// snapshot is the combined registry of the four services at one moment.
type snapshot map[string]*dto.MetricFamily

func gather(t *testing.T, comps map[string]*component) snapshot {
	t.Helper()
	var gs prometheus.Gatherers
	for _, c := range comps {
		gs = append(gs, c.registry)
	}
	mfs, err := gs.Gather()
	if err != nil {
		t.Fatalf("gathering the combined registry: %v", err)
	}
	s := snapshot{}
	for _, mf := range mfs {
		s[mf.GetName()] = mf
	}
	return s
}

// sum adds the series of name whose labels include want: counter and gauge
// values, histogram sample counts. ok is false when no series matched.
func (s snapshot) sum(name string, want map[string]string) (v float64, ok bool) {
	mf := s[name]
	if mf == nil {
		return 0, false
	}
series:
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, wv := range want {
			if got[k] != wv {
				continue series
			}
		}
		ok = true
		switch {
		case m.GetCounter() != nil:
			v += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			v += m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return v, ok
}

func (s snapshot) v(name string, labels map[string]string) float64 {
	v, _ := s.sum(name, labels)
	return v
}

// change is one expected effect of an operation on a metric.
type change struct {
	name   string
	labels map[string]string
	// delta is the expected increase from before; with atLeast it is a
	// lower bound. With absolute, want is compared to the value after.
	delta    float64
	atLeast  bool
	absolute bool
}

func (c change) String() string {
	var ls []string
	for k, v := range c.labels {
		ls = append(ls, fmt.Sprintf("%s=%q", k, v))
	}
	sort.Strings(ls)
	return c.name + "{" + strings.Join(ls, ",") + "}"
}

func (c change) want() string {
	switch {
	case c.absolute:
		return fmt.Sprint("value ", c.delta)
	case c.atLeast:
		return fmt.Sprint("an increase of at least ", c.delta)
	}
	return fmt.Sprint("an increase of ", c.delta)
}

func (c change) met(before, after snapshot) bool {
	a, ok := after.sum(c.name, c.labels)
	if !ok {
		return false
	}
	switch {
	case c.absolute:
		return a == c.delta
	case c.atLeast:
		return a-before.v(c.name, c.labels) >= c.delta
	default:
		return a-before.v(c.name, c.labels) == c.delta
	}
}

// expect polls the registries until every change is met (some follow
// asynchronously: acks, result events, spans of work), then reports the
// ones that are not.
func expect(t *testing.T, comps map[string]*component, before snapshot, changes []change) snapshot {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		after := gather(t, comps)
		var failed []string
		for _, c := range changes {
			if !c.met(before, after) {
				a, ok := after.sum(c.name, c.labels)
				failed = append(failed, fmt.Sprintf("%s: before %v, after %v (present %v), want %s", c, before.v(c.name, c.labels), a, ok, c.want()))
			}
		}
		if len(failed) == 0 {
			return after
		}
		if time.Now().After(deadline) {
			for _, f := range failed {
				t.Error(f)
			}
			t.FailNow()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func l(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// TestMetricsFollowAScaleUpAndAScaleDown drives CA's calls over the real
// stack and checks that the combined registry of the four services changes
// as each operation should make it change.
func TestMetricsFollowAScaleUpAndAScaleDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	components := captureComponents(t)
	s, emu := startWithEmulator(t, testConfig(t, t.TempDir(), 20000+rand.IntN(20000)))
	defer s.stop(t)
	comps := components()
	c := s.client(t)
	waitGroups(t, c)

	const (
		increase = "NodeGroupIncreaseSize"
		del      = "NodeGroupDeleteNodes"
	)
	workers := l("group", "workers")
	state := func(st string) map[string]string { return l("group", "workers", "state", st) }
	before := gather(t, comps)

	// Scale up by 2, plus one call CA gets an error for; the cloud fails
	// the first RunInstances (the adapter retries it).
	emu.InjectFaults(cvmemu.ActionRunInstances, cvmemu.Fault{Code: "InternalError", Message: "injected"})
	call(t, func(ctx context.Context) (*pb.NodeGroupIncreaseSizeResponse, error) {
		return c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "workers", Delta: 2})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "no-such-group", Delta: 1})
	cancel()
	errCode := status.Code(err)
	if errCode == codes.OK {
		t.Fatal("IncreaseSize of an unknown group succeeded")
	}
	running := waitRunning(t, c, "workers", 2)
	up := expect(t, comps, before, []change{
		// gRPC: codes and latency per RPC, the error included.
		{name: "nodesmith_gateway_grpc_requests_total", labels: l("method", increase, "code", "OK"), delta: 1},
		{name: "nodesmith_gateway_grpc_requests_total", labels: l("method", increase, "code", errCode.String()), delta: 1},
		{name: "nodesmith_gateway_grpc_request_duration_seconds", labels: l("method", increase), delta: 2},
		{name: "nodesmith_lifecycle_operations_total", labels: l("op", "IncreaseSize", "code", "OK"), delta: 1},
		// The prototype's six gauges: min, max, target, nodes per group,
		// counts per state and status.
		{name: "nodesmith_lifecycle_group_min_size", labels: workers, delta: 0, absolute: true},
		{name: "nodesmith_lifecycle_group_max_size", labels: workers, delta: 20, absolute: true},
		{name: "nodesmith_lifecycle_group_target_size", labels: workers, delta: 2, absolute: true},
		{name: "nodesmith_lifecycle_group_nodes", labels: workers, delta: 2, absolute: true},
		{name: "nodesmith_lifecycle_instances", labels: state("Running"), delta: 2, absolute: true},
		{name: "nodesmith_lifecycle_instances", labels: state("Pending"), delta: 0, absolute: true},
		{name: "nodesmith_lifecycle_creation_failed_instances", labels: workers, delta: 0, absolute: true},
		{name: "nodesmith_lifecycle_instances_past_deadline", labels: workers, delta: 0, absolute: true},
		// Transitions by from/to/reason, and time per state.
		{name: "nodesmith_lifecycle_transitions_total", labels: l("from", "Unknown", "to", "Pending", "reason", "created"), delta: 2},
		{name: "nodesmith_lifecycle_transitions_total", labels: l("from", "Pending", "to", "Creating", "reason", "start_create"), delta: 2},
		{name: "nodesmith_lifecycle_transitions_total", labels: l("from", "Joined", "to", "Running", "reason", "node_ready"), delta: 2},
		{name: "nodesmith_lifecycle_state_duration_seconds", labels: l("state", "Creating"), delta: 2}, // launch
		{name: "nodesmith_lifecycle_state_duration_seconds", labels: l("state", "Created"), delta: 2},  // hook
		{name: "nodesmith_lifecycle_state_duration_seconds", labels: l("state", "Joined"), delta: 2},   // join
		{name: "nodesmith_lifecycle_commands_published_total", labels: l("kind", "create", "result", "ok"), delta: 1, atLeast: true},
		// Cloud API calls by action and result, latency, rate-limiter waits.
		{name: "nodesmith_cloud_api_calls_total", labels: l("action", "RunInstances", "result", "ok"), delta: 1, atLeast: true},
		{name: "nodesmith_cloud_api_call_seconds", labels: l("action", "RunInstances"), delta: 1, atLeast: true},
		{name: "nodesmith_cloud_rate_limit_wait_seconds", labels: l("action", "RunInstances"), delta: 1, atLeast: true},
		{name: "nodesmith_cloud_api_calls_total", labels: l("action", "RunInstances"), delta: 2, atLeast: true}, // the failure and the retry
		{name: "nodesmith_cloud_api_calls_total", labels: l("action", "DescribeInstances", "result", "ok"), delta: 1, atLeast: true},
		// Hook runs by hook and result.
		{name: "nodesmith_hook_runs_total", labels: l("hook", "after_created", "result", "succeeded"), delta: 2},
		{name: "nodesmith_hook_run_duration_seconds", labels: l("hook", "after_created"), delta: 2},
		// JetStream consumers: handled messages, backlog, leader.
		{name: "nodesmith_worker_messages_total", labels: l("consumer", "hook-runner", "outcome", "ack"), delta: 2},
		{name: "nodesmith_worker_messages_total", labels: l("consumer", "cloud-adapter", "outcome", "ack"), delta: 1, atLeast: true},
		{name: "nodesmith_worker_messages_total", labels: l("consumer", "lifecycle", "outcome", "ack"), delta: 4, atLeast: true},
		{name: "nodesmith_jetstream_consumer_up", labels: l("consumer", "cloud-adapter"), delta: 1, absolute: true},
		{name: "nodesmith_jetstream_consumer_up", labels: l("consumer", "hook-runner"), delta: 1, absolute: true},
		{name: "nodesmith_jetstream_consumer_up", labels: l("consumer", "lifecycle"), delta: 1, absolute: true},
		{name: "nodesmith_jetstream_consumer_pending_messages", labels: l("consumer", "hook-runner"), delta: 0, absolute: true},
		{name: "nodesmith_lifecycle_leader", delta: 1, absolute: true},
	})
	// The injected failure is counted under its error kind, not ok.
	failed := (up.v("nodesmith_cloud_api_calls_total", l("action", "RunInstances")) - up.v("nodesmith_cloud_api_calls_total", l("action", "RunInstances", "result", "ok"))) -
		(before.v("nodesmith_cloud_api_calls_total", l("action", "RunInstances")) - before.v("nodesmith_cloud_api_calls_total", l("action", "RunInstances", "result", "ok")))
	if failed != 1 {
		t.Errorf("failed RunInstances calls counted: %v, want 1 (the injected fault)", failed)
	}

	// Scale down: CA deletes one node.
	victim := running[0]
	call(t, func(ctx context.Context) (*pb.NodeGroupDeleteNodesResponse, error) {
		return c.NodeGroupDeleteNodes(ctx, &pb.NodeGroupDeleteNodesRequest{Id: "workers",
			Nodes: []*pb.ExternalGrpcNode{{ProviderID: victim.GetId(), Name: nodeName(victim.GetId())}}})
	})
	down := expect(t, comps, up, []change{
		{name: "nodesmith_gateway_grpc_requests_total", labels: l("method", del, "code", "OK"), delta: 1},
		{name: "nodesmith_gateway_grpc_request_duration_seconds", labels: l("method", del), delta: 1},
		{name: "nodesmith_lifecycle_operations_total", labels: l("op", "DeleteNodes", "code", "OK"), delta: 1},
		{name: "nodesmith_lifecycle_group_target_size", labels: workers, delta: 1, absolute: true},
		{name: "nodesmith_lifecycle_group_nodes", labels: workers, delta: 1, absolute: true},
		{name: "nodesmith_lifecycle_instances", labels: state("Running"), delta: 1, absolute: true},
		{name: "nodesmith_lifecycle_instances", labels: state("Deleted"), delta: 1},
		{name: "nodesmith_lifecycle_transitions_total", labels: l("from", "Running", "to", "PendingDeletion", "reason", "delete_requested"), delta: 1},
		{name: "nodesmith_lifecycle_transitions_total", labels: l("from", "Deleting", "to", "Deleted", "reason", "cloud_terminated"), delta: 1},
		{name: "nodesmith_lifecycle_state_duration_seconds", labels: l("state", "Deleting"), delta: 1}, // deletion
		{name: "nodesmith_cloud_api_calls_total", labels: l("action", "TerminateInstances", "result", "ok"), delta: 1},
		{name: "nodesmith_hook_runs_total", labels: l("hook", "before_delete", "result", "succeeded"), delta: 1},
		{name: "nodesmith_lifecycle_commands_published_total", labels: l("kind", "terminate", "result", "ok"), delta: 1},
	})

	// No series is per instance: no instance-identifying label, and no
	// label value naming one of the instances or VMs of this run.
	ids := map[string]bool{}
	for _, in := range running {
		ids[in.GetId()] = true
		ids[nodeName(in.GetId())] = true
	}
	for name, mf := range down {
		if !strings.HasPrefix(name, "nodesmith_") {
			t.Errorf("metric %s lacks the nodesmith_ prefix", name)
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "instance_id", "cloud_id", "provider_id", "node", "batch":
					t.Errorf("%s has an unbounded label %s", name, lp.GetName())
				}
				if ids[lp.GetValue()] || strings.HasPrefix(lp.GetValue(), "ins-") {
					t.Errorf("%s{%s=%q} names an instance", name, lp.GetName(), lp.GetValue())
				}
			}
		}
	}
}

// nodeName is the Node name of a providerID (the instance id, its last
// path element).
func nodeName(providerID string) string {
	return providerID[strings.LastIndex(providerID, "/")+1:]
}

// exportedNames are the metric names the four services register, read
// from their registries' descriptors (so vectors without series count).
func exportedNames(t *testing.T, comps map[string]*component) map[string]bool {
	t.Helper()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for _, c := range comps {
		ch := make(chan *prometheus.Desc)
		go func() { c.registry.Describe(ch); close(ch) }()
		for d := range ch {
			if m := fq.FindStringSubmatch(d.String()); m != nil {
				names[m[1]] = true
			}
		}
	}
	return names
}

// TestDashboardAndAlertsUseOnlyExportedMetrics parses every expression of
// the alert rules and the Grafana dashboard with Prometheus's own parser
// and checks each metric it selects is one the services really export.
func TestDashboardAndAlertsUseOnlyExportedMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	components := captureComponents(t)
	s := start(t, testConfig(t, t.TempDir(), 20000+rand.IntN(20000)))
	defer s.stop(t)
	names := exportedNames(t, components())
	if !names["nodesmith_lifecycle_leader"] || !names["nodesmith_jetstream_consumer_pending_messages"] {
		t.Fatalf("descriptor names look wrong: %v", names)
	}
	exported := func(name string) bool {
		if names[name] {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && names[base] {
				return true
			}
		}
		return false
	}
	check := func(where, expr string) {
		t.Helper()
		e, err := parser.ParseExpr(expr)
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", where, expr, err)
			return
		}
		selectors := 0
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				selectors++
				if !exported(vs.Name) {
					t.Errorf("%s: metric %s is not exported by any service", where, vs.Name)
				}
			}
			return nil
		})
		if selectors == 0 {
			t.Errorf("%s: %q selects no metric", where, expr)
		}
	}

	root := filepath.Join("..", "..", "deploy")
	raw, err := os.ReadFile(filepath.Join(root, "prometheus", "nodesmith-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			check("alert "+r.Alert, r.Expr)
			n++
		}
	}

	raw, err = os.ReadFile(filepath.Join(root, "kustomize", "components", "monitoring", "nodesmith-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			check("panel "+p.Title, tg.Expr)
			n++
		}
	}
	// Template variables use Grafana's label_values(metric, label).
	lv := regexp.MustCompile(`^label_values\((\w+),\s*\w+\)$`)
	for _, v := range dash.Templating.List {
		if v.Definition == "" {
			continue
		}
		m := lv.FindStringSubmatch(v.Definition)
		if m == nil || !exported(m[1]) {
			t.Errorf("variable %s: %q does not name an exported metric", v.Name, v.Definition)
		}
	}
	if n < 20 {
		t.Fatalf("only %d expressions checked; the files were not read as expected", n)
	}
}
