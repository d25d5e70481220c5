package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/nodesmith/nodesmith/cmd/nodesmith-node-agent/agent"
	"github.com/nodesmith/nodesmith/libs/command"
	"github.com/nodesmith/nodesmith/libs/health"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodesmith/nodesmith/libs/contract"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
)

// TestKubeModeSpotInterruptionDrainsAndReplaces: with a real
// kube-apiserver, the Node of a Running instance gets what the node agent
// writes on a reclaim notice (taint and annotations; the agent itself is
// checked against the emulator in dev/spotagent). Lifecycle drains it
// through the before_delete hook (kubectl drain) before the termination
// time, closes it as interrupted, and its replacement reaches Running
// while the group's target stays.
func TestKubeModeSpotInterruptionDrainsAndReplaces(t *testing.T) {
	spotInterruption(t, false)
}

// TestKubeModeSpotReclaimWithTheNodeAgent is the same with the whole
// chain: the group's template asks for spot VMs, the emulator schedules a
// reclaim, the node agent (in process, pointed at the emulator's per-VM
// metadata endpoint) marks the Node, and lifecycle drains and terminates
// the VM before the emulator would reclaim it.
func TestKubeModeSpotReclaimWithTheNodeAgent(t *testing.T) {
	spotInterruption(t, true)
}

func spotInterruption(t *testing.T, withAgent bool) {
	s, rc, cs := startKubeStack(t, withAgent)

	c := s.client(t)
	call(t, func(ctx context.Context) (*pb.NodeGroupIncreaseSizeResponse, error) {
		return c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "workers", Delta: 1})
	})
	victim := waitRunning(t, c, "workers", 1)[0].GetId()
	node := waitNodesReady(t, cs, victim)[victim]

	var term time.Time
	if withAgent {
		startNodeAgent(t, s, rc, node.Name, victim)
		term = scheduleReclaim(t, s, victim, 120)
	} else {
		term = markAsTheAgentDoes(t, cs, node.Name)
	}
	checkSpotOutcome(t, s, c, victim, term)
}

// startKubeStack starts the stack in Kubernetes mode (real etcd and
// kube-apiserver; skipped under -short) and returns it with an
// administrator's client. With spot the built-in "workers" group's
// template asks for spot VMs (SPOTPAID with a max price). The stack stops
// at the end of the test.
func startKubeStack(t *testing.T, spot bool) (*stack, *rest.Config, kubernetes.Interface) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and the whole stack")
	}
	kubetest.EtcdBinary(t)
	if _, err := kubetest.EnsureAPIServer(t.Context(), t.Logf); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := testConfig(t, dir, 20000+rand.IntN(20000))
	cfg.Kube = true
	if spot {
		conf := strings.Replace(string(DefaultNodeGroupConfig), "InstanceChargeType: POSTPAID_BY_HOUR",
			`InstanceChargeType: SPOTPAID
      InstanceMarketOptions: {MarketType: spot, SpotOptions: {MaxPrice: "0.5", SpotInstanceType: one-time}}`, 1)
		if conf == string(DefaultNodeGroupConfig) {
			t.Fatal("the built-in configuration no longer has the on-demand charge type to replace")
		}
		cfg.ConfigFile = filepath.Join(dir, "spot.yaml")
		must(t, os.WriteFile(cfg.ConfigFile, []byte(conf), 0o600))
	}
	s := start(t, cfg)
	t.Cleanup(func() { s.stop(t) })
	rc, err := clientcmd.BuildConfigFromFlags("", s.addrs.Kube.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return s, rc, cs
}

// waitNodesReady waits for a Ready Node per providerID and returns them by
// providerID.
func waitNodesReady(t *testing.T, cs kubernetes.Interface, providerIDs ...string) map[string]corev1.Node {
	t.Helper()
	byPID := map[string]corev1.Node{}
	kubeEventually(t, "the instances' Nodes Ready", func() (bool, string) {
		list, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		clear(byPID)
		for _, n := range list.Items {
			byPID[n.Spec.ProviderID] = n
		}
		for _, pid := range providerIDs {
			n, ok := byPID[pid]
			if !ok {
				return false, "no Node with providerID " + pid
			}
			if why := nodeProblem(n); why != "" {
				return false, "Node " + n.Name + ": " + why
			}
		}
		return true, ""
	})
	return byPID
}

// markAsTheAgentDoes writes on a Node what the node agent writes on a
// notice two minutes ahead, and returns the termination time.
func markAsTheAgentDoes(t *testing.T, cs kubernetes.Interface, name string) time.Time {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	term := now.Add(2 * time.Minute).Truncate(time.Second)
	kubeEventually(t, "the Node marked as the agent does", func() (bool, string) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: contract.TaintSpotInterruption, Value: "url", Effect: corev1.TaintEffect(contract.TaintSpotInterruptionEffect)})
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[contract.AnnotationSpotTerminationTime] = term.Format(time.RFC3339)
		n.Annotations[contract.AnnotationSpotNoticeObservedAt] = now.Format(time.RFC3339)
		n.Annotations[contract.AnnotationSpotNoticeSource] = "url"
		if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return term
}

// startNodeAgent runs the node agent (in process, until the end of the
// test) for the Node node of VM providerID pid, pointed at the emulator's
// metadata endpoint of that VM.
func startNodeAgent(t *testing.T, s *stack, rc *rest.Config, node, pid string) {
	t.Helper()
	acfg := agent.DefaultConfig()
	acfg.NodeName = node
	acfg.MetadataURL = s.addrs.Metadata + "/" + cloudID(pid) + "/latest/meta-data/spot/termination-time"
	acfg.Interval = 100 * time.Millisecond
	acfg.HealthAddr = "127.0.0.1:0"
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, acfg, agent.Deps{
			Host:       command.Host{Logger: log, Registry: prometheus.NewRegistry(), Health: &health.Checks{}},
			RESTConfig: rc,
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent of %s: %v", node, err)
		}
	})
}

// cloudID is the VM id at the end of a providerID.
func cloudID(pid string) string { return pid[strings.LastIndex(pid, "/")+1:] }

// scheduleReclaim has the emulator reclaim the VM of providerID pid in
// seconds (admin API) and returns the announced termination time.
func scheduleReclaim(t *testing.T, s *stack, pid string, seconds int) time.Time {
	t.Helper()
	admin := restClient{t: t, base: s.addrs.EmulatorAdmin}
	var r struct {
		TerminationTime time.Time `json:"terminationTime"`
	}
	must(t, json.Unmarshal(admin.must(200, "POST", "/reclaim", fmt.Sprintf(`{"instanceId":%q,"inSeconds":%d}`, cloudID(pid), seconds)).body, &r))
	return r.TerminationTime
}

// checkSpotOutcome waits for the interrupted instance to be Deleted and
// its replacement Running, before the termination time, drained by the
// before_delete hook, with the group's target unchanged.
func checkSpotOutcome(t *testing.T, s *stack, c pb.CloudProviderClient, victim string, term time.Time) {
	t.Helper()
	api := restClient{t: t, base: "http://" + s.addrs.REST, token: s.addrs.AdminToken}
	type inst struct {
		ID         string `json:"id"`
		ProviderID string `json:"providerID"`
		State      string `json:"state"`
	}
	var list struct {
		Items []inst `json:"items"`
	}
	var closed inst
	kubeEventually(t, "the interrupted instance Deleted, its replacement Running", func() (bool, string) {
		must(t, json.Unmarshal(api.must(200, "GET", "/api/v1/instances?group=workers&limit=100", "").body, &list))
		running := 0
		for _, in := range list.Items {
			switch {
			case in.ProviderID == victim:
				closed = in
			case in.State == "RUNNING":
				running++
			}
		}
		return closed.State == "DELETED" && running == 1, fmt.Sprintf("instances %+v", list.Items)
	})
	if time.Now().After(term) {
		t.Errorf("the interrupted instance closed after the termination time %s", term)
	}
	checkInterruptedHistory(t, api, closed.ID)
	g := call(t, func(ctx context.Context) (*pb.NodeGroupTargetSizeResponse, error) {
		return c.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: "workers"})
	})
	if g.GetTargetSize() != 1 {
		t.Errorf("target %d, want 1", g.GetTargetSize())
	}
}

// historyEntry is a transition of an instance's history (REST).
type historyEntry struct {
	From   string    `json:"from"`
	To     string    `json:"to"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// checkInterruptedHistory checks that instance id (REST id) was deleted
// as interrupted and drained by the before_delete hook, and returns its
// history.
func checkInterruptedHistory(t *testing.T, api restClient, id string) []historyEntry {
	t.Helper()
	var detail struct {
		History []historyEntry `json:"history"`
	}
	must(t, json.Unmarshal(api.must(200, "GET", "/api/v1/instances/"+id, "").body, &detail))
	drained, interrupted := false, false
	for _, tr := range detail.History {
		drained = drained || (tr.From == "PENDING_DELETION" && tr.To == "DELETING" && tr.Reason == "before_delete hook succeeded")
		interrupted = interrupted || (tr.To == "PENDING_DELETION" && strings.HasPrefix(tr.Reason, "interrupted"))
	}
	if !drained || !interrupted {
		t.Errorf("instance %s history %+v: want an interrupted deletion drained by the before_delete hook", id, detail.History)
	}
	return detail.History
}
