package embedded

import (
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodesmith/nodesmith/dev/kubesim"
	lifecycle "github.com/nodesmith/nodesmith/services/lifecycle/service"
	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
	"github.com/nodesmith/nodesmith/tools/simcluster"
)

// With Config.Kube the stack runs a real kube-apiserver (etcd from
// Debian's etcd-server package, kube-apiserver built once by
// tools/kube/kubetest) instead of showing lifecycle the simulated cluster:
// lifecycle runs in Kubernetes mode, as in production (client-go informer
// on Nodes, leader election on a Lease, as the kustomize base's
// ServiceAccount), and the simulated VMs' kubelets register real Nodes
// (dev/kubesim). A Cluster Autoscaler can then watch the same API server.

// DemoPods are Pods to try a Cluster Autoscaler with (written to
// Kube.DemoPods).
//
//go:embed demo-pods.yaml
var DemoPods []byte

// The files of the Kubernetes side, in <data dir>/kube (the admin
// kubeconfig is kubetest's, named "kubeconfig").
const (
	cloudConfigFile = "cloud-config.yaml"
	demoPodsFile    = "demo-pods.yaml"
)

// kubeTokenExpiry is the validity of lifecycle's ServiceAccount token:
// that of the API server's certificates (tools/kube/kubetest), after which
// the stack has to be restarted anyway.
const kubeTokenExpiry = 24 * time.Hour

// Kube tells where the Kubernetes side of a Config.Kube stack is.
type Kube struct {
	// APIServer is kube-apiserver's URL.
	APIServer string
	// Kubeconfig is a kubeconfig file of an administrator (for Cluster
	// Autoscaler and kubectl).
	Kubeconfig string
	// CloudConfig is Cluster Autoscaler's --cloud-config for the
	// externalgrpc provider: the gateway's address.
	CloudConfig string
	// DemoPods is a copy of DemoPods, for kubectl apply -f.
	DemoPods string
}

// ClusterAutoscalerArgs is the command line of a Cluster Autoscaler
// running outside the cluster against the stack: externalgrpc (node groups
// come from the gateway, so neither --nodes nor auto-discovery), short
// loops and delays for a demonstration, and the default scheduler
// bypassed, because this API server has no scheduler: CA then acts on
// pods no scheduler has looked at, which stay Pending.
func ClusterAutoscalerArgs(k Kube) []string {
	return []string{
		"cluster-autoscaler",
		"--cloud-provider=externalgrpc",
		"--cloud-config=" + k.CloudConfig,
		"--kubeconfig=" + k.Kubeconfig,
		"--bypassed-scheduler-names=default-scheduler",
		"--scan-interval=10s",
		"--scale-down-delay-after-add=1m",
		"--scale-down-unneeded-time=1m",
		"--leader-elect=false",
		"--v=2",
	}
}

// cloudConfig is the content of Kube.CloudConfig for a gateway serving
// plaintext gRPC on grpcAddr.
func cloudConfig(grpcAddr string) []byte {
	return fmt.Appendf(nil, `# Cluster Autoscaler --cloud-config (externalgrpc) for the embedded stack of
# make run ARGS=--kube: plaintext gRPC on loopback, so no cert, key or cacert.
address: %s
`, grpcAddr)
}

// kubeStack is the running Kubernetes side.
type kubeStack struct {
	Kube
	dir string
	// lifecycleKubeconfig is the kubeconfig of lifecycle's ServiceAccount.
	lifecycleKubeconfig string
	client              kubernetes.Interface
	stopAPIServer       func()
	// stopKubelets stops the kubelet stand-ins and waits for them.
	stopKubelets func()
}

// startKube starts etcd and kube-apiserver under the data directory and
// gives lifecycle its namespace and ServiceAccount.
func startKube(ctx context.Context, cfg Config, log *slog.Logger) (*kubeStack, error) {
	dir := cfg.path("kube")
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	log.Info("starting etcd and kube-apiserver " + kubetest.KubernetesVersion + " (logs in " + dir + ")")
	c, stop, err := kubetest.StartStandalone(ctx, dir, func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) })
	if err != nil {
		return nil, fmt.Errorf("--kube: %w (etcd comes from `make test-deps`, kube-apiserver from `make kube-apiserver`)", err)
	}
	client, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		stop()
		return nil, err
	}
	// What the controller-manager's ServiceAccount controller would do:
	// without it the API server admits no Pod in "default".
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Create(cctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	cancel()
	if err != nil && !apierrors.IsAlreadyExists(err) {
		stop()
		return nil, fmt.Errorf("--kube: creating ServiceAccount default/default: %w", err)
	}
	demo := filepath.Join(dir, demoPodsFile)
	if err := writeFileAtomic(demo, DemoPods, 0o644); err != nil {
		stop()
		return nil, err
	}
	lcKubeconfig, err := kubesim.LifecycleAccess(ctx, c, lifecycle.DefaultConfig().LeaseName, kubeTokenExpiry)
	if err != nil {
		stop()
		return nil, fmt.Errorf("--kube: %w", err)
	}
	return &kubeStack{
		Kube:                Kube{APIServer: c.Host, Kubeconfig: c.Kubeconfig, CloudConfig: filepath.Join(dir, cloudConfigFile), DemoPods: demo},
		dir:                 dir,
		lifecycleKubeconfig: lcKubeconfig,
		client:              client,
		stopAPIServer:       stop,
		stopKubelets:        func() {},
	}, nil
}

// runKubelets starts the stand-ins of the kubelets of the VMs that join
// cluster; machines describes the VMs.
func (k *kubeStack) runKubelets(ctx context.Context, cluster *simcluster.Cluster, machines kubesim.Machines, log *slog.Logger) {
	ctx, cancel := context.WithCancel(ctx)
	kubelets := kubesim.NewKubelets(k.client, kubesim.KubeletOptions{Machines: machines, Logger: log})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); kubelets.Run(ctx, cluster) }()
	k.stopKubelets = func() { cancel(); wg.Wait() }
}

// lifecycleConfig puts lifecycle in Kubernetes mode against the API server.
func (k *kubeStack) lifecycleConfig(lc *lifecycle.Config) {
	lc.Cluster = lifecycle.ClusterKubernetes
	lc.Kubeconfig = k.lifecycleKubeconfig
	lc.Namespace = kubesim.Namespace
}

// writeCloudConfig writes CA's cloud-config for the gateway on grpcAddr.
func (k *kubeStack) writeCloudConfig(grpcAddr string) error {
	return writeFileAtomic(k.CloudConfig, cloudConfig(loopbackAddr(grpcAddr)), 0o600)
}

// loopbackAddr makes an address a client can dial: an unspecified host
// (":8086", "0.0.0.0:8086") becomes 127.0.0.1.
func loopbackAddr(addr string) string {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		return net.JoinHostPort("127.0.0.1", p)
	}
	return addr
}
