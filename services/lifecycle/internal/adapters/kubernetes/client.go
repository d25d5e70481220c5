// Package kubernetes holds lifecycle's Kubernetes adapters, all on
// client-go: the node watcher (ports.Cluster) over a Node informer, leader
// election (ports.Leader) on a Lease, notices as Events on Nodes
// (ports.Notifier), the status ConfigMap (ports.StatusSink), and the
// plumbing (client configuration, klog routed into slog).
package kubernetes

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// FieldManager names lifecycle's writes (managedFields, events' source).
const FieldManager = "nodesmith-lifecycle"

// serviceAccountNamespace is where a pod finds its namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// InCluster reports whether the process runs in a pod that can use the
// in-cluster configuration (the API server's address in the environment).
func InCluster() bool {
	return os.Getenv("KUBERNETES_SERVICE_HOST") != "" && os.Getenv("KUBERNETES_SERVICE_PORT") != ""
}

// ClientOptions configure the API client.
type ClientOptions struct {
	// Kubeconfig is a kubeconfig file; empty means the in-cluster
	// configuration.
	Kubeconfig string
	// QPS and Burst bound the client's request rate (client-go's defaults,
	// 5 and 10, are too low for thousands of Nodes).
	QPS   float32
	Burst int
}

// RESTConfig returns the configuration for o.
func RESTConfig(o ClientOptions) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if o.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("loading kubeconfig %s: %w", o.Kubeconfig, err)
		}
	} else {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster Kubernetes configuration: %w", err)
		}
	}
	cfg = rest.CopyConfig(cfg)
	if o.QPS > 0 {
		cfg.QPS = o.QPS
	}
	if o.Burst > 0 {
		cfg.Burst = o.Burst
	}
	cfg.UserAgent = FieldManager
	return cfg, nil
}

// NewClientset returns a clientset for cfg.
func NewClientset(cfg *rest.Config) (kubernetes.Interface, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	return cs, nil
}

// ClusterIDPrefix starts a cluster id derived from the cluster itself.
const ClusterIDPrefix = "k8s-"

// DerivedClusterID names the cluster lifecycle runs in: "k8s-" and the uid
// of its kube-system namespace, unique per cluster and stable for its life
// (the namespace cannot be deleted). Reading it needs get on that one
// namespace.
func DerivedClusterID(ctx context.Context, client kubernetes.Interface) (string, error) {
	ns, err := client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading namespace %s, whose uid names the cluster: %w", metav1.NamespaceSystem, err)
	}
	if ns.UID == "" {
		return "", fmt.Errorf("namespace %s has no uid", metav1.NamespaceSystem)
	}
	return ClusterIDPrefix + string(ns.UID), nil
}

// DefaultNamespace is the pod's namespace: POD_NAMESPACE (the downward
// API; the manifests set it), else the namespace of its service account's
// mounted token, else kube-system outside a pod.
func DefaultNamespace() string {
	if ns := strings.TrimSpace(os.Getenv("POD_NAMESPACE")); ns != "" {
		return ns
	}
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return "kube-system"
}

// DefaultIdentity names this process in leader election: the pod's name
// (POD_NAME, from the downward API) or the host name, plus a random suffix
// so that a restarted process never mistakes itself for the holder of the
// lease it held before (it must campaign like anyone else).
func DefaultIdentity() string {
	name := os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	if name == "" {
		name = "lifecycle"
	}
	return name + "_" + strings.ToLower(rand.Text()[:8])
}

var routeKlog sync.Once

// RouteKlog sends client-go's logs (klog) to log. klog's logger is
// process-global and must not change while client-go runs (it is read
// without synchronisation), so the first call wins: in a process that
// runs several services (tests, the embedded stack), they share it.
func RouteKlog(log *slog.Logger) {
	routeKlog.Do(func() { klog.SetSlogLogger(log.With("component", "client-go")) })
}
