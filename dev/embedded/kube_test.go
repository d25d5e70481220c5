package embedded

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodesmith/nodesmith/dev/kubesim"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
)

// kubeEventually polls cond until it holds, failing after a generous
// deadline with the last reason cond gave.
func kubeEventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 2m: %s", what, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestKubeModeRegistersAndRemovesRealNodes is the acceptance path of `make
// run ARGS=--kube`: with a real kube-apiserver, lifecycle in Kubernetes
// mode (client-go, Lease) and the kubelet stand-ins, an IncreaseSize
// through the gateway ends in Ready Nodes with the instances' providerIDs,
// the kubelet's labels and the group's, without the not-ready taint; a
// DeleteNodes ends with those Nodes gone. The files the banner names work:
// the admin kubeconfig, the cloud-config naming the gateway, the demo Pods.
func TestKubeModeRegistersAndRemovesRealNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and the whole stack")
	}
	kubetest.EtcdBinary(t)
	if _, err := kubetest.EnsureAPIServer(t.Context(), t.Logf); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, t.TempDir(), 20000+rand.IntN(20000))
	cfg.Kube = true
	s := start(t, cfg)
	defer s.stop(t)
	k := s.addrs.Kube
	if k == nil {
		t.Fatal("no Kubernetes side announced")
	}

	// The files are where the README says.
	dir := filepath.Join(cfg.DataDir, "kube")
	for got, want := range map[string]string{k.Kubeconfig: "kubeconfig", k.CloudConfig: cloudConfigFile, k.DemoPods: demoPodsFile} {
		if got != filepath.Join(dir, want) {
			t.Errorf("file %s, want %s", got, filepath.Join(dir, want))
		}
	}
	b, err := os.ReadFile(k.CloudConfig)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\naddress: "+s.addrs.GRPC+"\n") {
		t.Errorf("cloud-config does not name the gateway %s:\n%s", s.addrs.GRPC, b)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", k.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// Lifecycle leads on its Lease, as in production.
	kubeEventually(t, "lifecycle holds its Lease", func() (bool, string) {
		l, err := cs.CoordinationV1().Leases(kubesim.Namespace).Get(ctx, "nodesmith-lifecycle", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", "no holder"
	})

	// The demo Pods the banner suggests are accepted and stay Pending.
	demo := demoPods(t, k.DemoPods)
	for _, p := range demo {
		if _, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating demo Pod %s: %v", p.Name, err)
		}
	}
	for _, p := range demo {
		if err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting demo Pod %s: %v", p.Name, err)
		}
	}

	c := s.client(t)
	call(t, func(ctx context.Context) (*pb.NodeGroupIncreaseSizeResponse, error) {
		return c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "workers", Delta: 2})
	})
	instances := waitRunning(t, c, "workers", 2)
	byPID := map[string]corev1.Node{}
	kubeEventually(t, "one Ready Node per instance, labelled, without the not-ready taint", func() (bool, string) {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		clear(byPID)
		for _, n := range list.Items {
			byPID[n.Spec.ProviderID] = n
		}
		if len(list.Items) != len(instances) {
			return false, fmt.Sprintf("%d Nodes for %d instances", len(list.Items), len(instances))
		}
		for _, in := range instances {
			n, ok := byPID[in.GetId()]
			if !ok {
				return false, "no Node with providerID " + in.GetId()
			}
			if why := nodeProblem(n); why != "" {
				return false, "Node " + n.Name + ": " + why
			}
		}
		return true, ""
	})

	var nodes []*pb.ExternalGrpcNode
	for _, in := range instances {
		nodes = append(nodes, &pb.ExternalGrpcNode{ProviderID: in.GetId(), Name: byPID[in.GetId()].Name})
	}
	call(t, func(ctx context.Context) (*pb.NodeGroupDeleteNodesResponse, error) {
		return c.NodeGroupDeleteNodes(ctx, &pb.NodeGroupDeleteNodesRequest{Id: "workers", Nodes: nodes})
	})
	kubeEventually(t, "the deleted instances' Nodes removed", func() (bool, string) {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var left []string
		for _, n := range list.Items {
			left = append(left, n.Name+" ("+n.Spec.ProviderID+")")
		}
		return len(left) == 0, fmt.Sprintf("Nodes left: %v", left)
	})
	kubeEventually(t, "no instances left", func() (bool, string) {
		res := call(t, func(ctx context.Context) (*pb.NodeGroupNodesResponse, error) {
			return c.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: "workers"})
		})
		return len(res.GetInstances()) == 0, fmt.Sprintf("instances: %v", res.GetInstances())
	})
}

// nodeProblem says what is wrong with a Node of the built-in "workers"
// group ("" if nothing).
func nodeProblem(n corev1.Node) string {
	if kubesim.ReadyStatus(n.Status.Conditions) != corev1.ConditionTrue {
		return "not Ready"
	}
	if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == kubesim.TaintNotReady }) {
		return fmt.Sprintf("still has the not-ready taint: %v", n.Spec.Taints)
	}
	for key, want := range map[string]string{
		"kubernetes.io/hostname":           n.Name,
		"kubernetes.io/os":                 "linux",
		"kubernetes.io/arch":               "amd64",
		"node.kubernetes.io/instance-type": "S5.MEDIUM4",
		"topology.kubernetes.io/zone":      "ap-guangzhou-3",
		// lifecycle's, through its client-go adapter
		"nodesmith.io/node-group": "workers",
		"nodesmith.io/pool":       "workers",
	} {
		if got, ok := n.Labels[key]; !ok || got != want {
			return fmt.Sprintf("label %s=%q, want %q", key, got, want)
		}
	}
	var internalIP, hostname bool
	for _, a := range n.Status.Addresses {
		internalIP = internalIP || (a.Type == corev1.NodeInternalIP && strings.HasPrefix(a.Address, "127."))
		hostname = hostname || (a.Type == corev1.NodeHostName && a.Address == n.Name)
	}
	if !internalIP || !hostname {
		return fmt.Sprintf("addresses %v", n.Status.Addresses)
	}
	// The node template of the built-in config says the same.
	for r, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: "1900m", corev1.ResourceMemory: "3584Mi", corev1.ResourcePods: "110"} {
		if got := n.Status.Allocatable[r]; got.Cmp(resource.MustParse(want)) != 0 {
			return fmt.Sprintf("allocatable %s = %s, want %s", r, got.String(), want)
		}
	}
	return ""
}

// demoPods decodes the demo Pods file the banner names.
func demoPods(t *testing.T, path string) []*corev1.Pod {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(b, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	list, ok := obj.(*corev1.List)
	if !ok {
		t.Fatalf("%s holds a %T, want a List", path, obj)
	}
	var pods []*corev1.Pod
	for _, item := range list.Items {
		o, _, err := scheme.Codecs.UniversalDeserializer().Decode(item.Raw, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		p, ok := o.(*corev1.Pod)
		if !ok {
			t.Fatalf("%s holds a %T, want Pods", path, o)
		}
		pods = append(pods, p)
	}
	if len(pods) == 0 {
		t.Fatalf("%s holds no Pods", path)
	}
	return pods
}

// TestREADMEShowsTheClusterAutoscalerCommandOfTheBanner keeps the README's
// section on a real Cluster Autoscaler word for word what the banner of
// `make run ARGS=--kube` prints, with the paths relative to the repository.
func TestREADMEShowsTheClusterAutoscalerCommandOfTheBanner(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	dir := filepath.Join(".data", "kube")
	k := Kube{Kubeconfig: filepath.Join(dir, "kubeconfig"), CloudConfig: filepath.Join(dir, cloudConfigFile), DemoPods: filepath.Join(dir, demoPodsFile)}
	for _, want := range []string{
		"```sh\n" + strings.Join(ClusterAutoscalerArgs(k), " \\\n    ") + "\n```",
		"export KUBECONFIG=$PWD/" + k.Kubeconfig + "\n",
		"kubectl apply -f " + k.DemoPods + "\n",
		"kubectl delete -f " + k.DemoPods + "\n",
		"`" + k.CloudConfig + "` | CA's `--cloud-config` for externalgrpc: `address: " + DefaultConfig().GRPCAddr + "`",
		"make run ARGS=--kube",
	} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md lacks:\n%s", want)
		}
	}
	if !strings.Contains(string(cloudConfig(DefaultConfig().GRPCAddr)), "\naddress: "+DefaultConfig().GRPCAddr+"\n") {
		t.Errorf("cloud-config for %s:\n%s", DefaultConfig().GRPCAddr, cloudConfig(DefaultConfig().GRPCAddr))
	}
}
