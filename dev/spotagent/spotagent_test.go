// Package spotagent checks the node agent against the emulator's metadata
// service and a real kube-apiserver: the two were built apart (the agent
// against a stand-in of Tencent's documented answers), so this is where a
// disagreement on the URL layout or the time format shows.
package spotagent

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodesmith/nodesmith/cmd/nodesmith-node-agent/agent"
	"github.com/nodesmith/nodesmith/libs/command"
	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/libs/health"
	"github.com/nodesmith/nodesmith/libs/logging"
	"github.com/nodesmith/nodesmith/libs/logging/logtest"
	"github.com/nodesmith/nodesmith/libs/metrics/metricstest"
	"github.com/nodesmith/nodesmith/libs/testwait"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
)

const (
	region   = "ap-guangzhou"
	zone     = "ap-guangzhou-3"
	secretID = "AKIDspotagent"
	key      = "spot-agent-test-key"
)

func TestAgentMarksItsNodeWhenTheEmulatorAnnouncesAReclaim(t *testing.T) {
	kube := kubetest.Start(t) // skips under -short
	admin := kube.Clientset(t)

	cfg := cvmemu.DefaultConfig()
	cfg.Credentials = map[string]string{secretID: key}
	cfg.Accounts = map[string]string{secretID: "spot"}
	cfg.BootDelay, cfg.TerminateDelay = 50*time.Millisecond, 50*time.Millisecond
	emu, err := cvmemu.Start("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emu.Close() })
	metadata, err := emu.ServeMetadata("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	// A spot VM, created the way the Tencent adapter creates one.
	client, err := cvmemu.NewClient(emu.Endpoint(), secretID, key, region)
	if err != nil {
		t.Fatal(err)
	}
	req := cvm.NewRunInstancesRequest()
	req.Placement = &cvm.Placement{Zone: common.StringPtr(zone)}
	req.ImageId = common.StringPtr("img-abcdefgh")
	req.InstanceType = common.StringPtr("S5.MEDIUM4")
	req.InstanceChargeType = common.StringPtr("SPOTPAID")
	req.InstanceMarketOptions = &cvm.InstanceMarketOptionsRequest{
		MarketType:  common.StringPtr("spot"),
		SpotOptions: &cvm.SpotMarketOptions{MaxPrice: common.StringPtr("0.5"), SpotInstanceType: common.StringPtr("one-time")},
	}
	resp, err := client.RunInstances(req)
	if err != nil {
		t.Fatal(err)
	}
	id := *resp.Response.InstanceIdSet[0]

	node := "spot-" + id
	if _, err := admin.CoreV1().Nodes().Create(t.Context(), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{contract.LabelCapacityType: contract.CapacityTypeSpot}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	acfg := agent.DefaultConfig()
	acfg.NodeName = node
	acfg.MetadataURL = metadata + "/" + id + "/latest/meta-data/spot/termination-time"
	acfg.Interval = 20 * time.Millisecond
	acfg.HealthAddr = "127.0.0.1:0"
	logs := &logtest.Buffer{}
	log, err := logging.New(logging.Options{Writer: logs, Level: "debug"})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, acfg, agent.Deps{
			Host:       command.Host{Logger: log, Registry: reg, Health: &health.Checks{}},
			RESTConfig: kube.RESTConfig(),
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
		if t.Failed() {
			t.Logf("agent logs:\n%s", logs.String())
		}
	})

	// No reclaim: the agent polls (404) and leaves the Node alone.
	testwait.Until(t, 30*time.Second, "two polls without a notice", func() bool {
		return metricstest.Value(t, reg, "nodesmith_node_agent_polls_total", map[string]string{"result": "none"}) >= 2
	})
	if n := getNode(t, admin, node); spotTaint(n) != nil {
		t.Fatalf("tainted without a notice: %+v", n.Spec.Taints)
	}

	// The cloud announces a reclaim an hour ahead: the Node is tainted and
	// annotated with the same instant the emulator will reclaim at.
	at, err := emu.ScheduleReclaim(id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 30*time.Second, "the spot taint", func() bool { return spotTaint(getNode(t, admin, node)) != nil })
	n := getNode(t, admin, node)
	got, err := time.Parse(time.RFC3339, n.Annotations[contract.AnnotationSpotTerminationTime])
	if err != nil {
		t.Fatalf("annotation %s=%q: %v", contract.AnnotationSpotTerminationTime, n.Annotations[contract.AnnotationSpotTerminationTime], err)
	}
	// Tencent's format has whole seconds.
	if d := got.Sub(at.Truncate(time.Second)); d != 0 {
		t.Fatalf("termination time on the Node %v, the emulator reclaims at %v", got, at)
	}
	if tt := spotTaint(n); tt.Effect != corev1.TaintEffect(contract.TaintSpotInterruptionEffect) {
		t.Fatalf("taint %+v", tt)
	}
}

func getNode(t *testing.T, c kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func spotTaint(n *corev1.Node) *corev1.Taint {
	for i := range n.Spec.Taints {
		if n.Spec.Taints[i].Key == contract.TaintSpotInterruption {
			return &n.Spec.Taints[i]
		}
	}
	return nil
}
