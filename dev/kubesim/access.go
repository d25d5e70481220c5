// Package kubesim is the Kubernetes side of the simulated world, against a
// real kube-apiserver (tools/kube/kubetest): lifecycle's namespace and
// ServiceAccount with the kustomize base's RBAC, and stand-ins for what
// the kubelets of the simulated VMs and a cluster's node lifecycle
// controller do to Nodes. `make run ARGS=--kube` (dev/embedded) and the
// fault harness (dev/chaos) use it.
package kubesim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
	"github.com/nodesmith/nodesmith/tools/kube/manifests"
)

const (
	// Namespace holds lifecycle's ServiceAccount, its Lease, its status
	// ConfigMap: the namespace of the kustomize base.
	Namespace = "nodesmith"
	// LifecycleAccount is lifecycle's ServiceAccount in the kustomize base.
	LifecycleAccount = "lifecycle"
)

// KustomizeBase finds deploy/kustomize/base from the working directory
// (the repository or a directory in it).
func KustomizeBase() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		base := filepath.Join(d, "deploy", "kustomize", "base")
		if _, err := os.Stat(filepath.Join(base, "kustomization.yaml")); err == nil {
			return base, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("deploy/kustomize/base not found from %s: run from the nodesmith repository", wd)
		}
	}
}

// LifecycleAccess gives lifecycle what a deployment of the kustomize base
// gives its pods, and nothing more: Namespace, the ServiceAccount and RBAC
// of deploy/kustomize/base (rendered, not copied) in it, and a kubeconfig
// file with a token of that ServiceAccount valid for expiry (not
// refreshed). It returns the file's path once the grants are in effect
// (the authorizer reads them through an informer), so lifecycle's first
// calls are not refused: reading the Lease leaseName and listing Nodes.
func LifecycleAccess(ctx context.Context, c *kubetest.Cluster, leaseName string, expiry time.Duration) (string, error) {
	admin, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = admin.CoreV1().Namespaces().Create(cctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating namespace %s: %w", Namespace, err)
	}
	base, err := KustomizeBase()
	if err != nil {
		return "", err
	}
	objs, err := manifests.Render(base)
	if err != nil {
		return "", err
	}
	n, err := c.ApplyRBAC(ctx, manifests.NewSet(objs).OfApp("lifecycle"), Namespace)
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "", errors.New("the kustomize base has no ServiceAccount or RBAC labelled app.kubernetes.io/name=lifecycle")
	}
	kubeconfig, err := c.ServiceAccountKubeconfig(ctx, Namespace, LifecycleAccount, expiry)
	if err != nil {
		return "", err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return "", err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		// A missing Lease (NotFound) means the read was authorized.
		_, err := cs.CoordinationV1().Leases(Namespace).Get(wctx, leaseName, metav1.GetOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			_, err = cs.CoreV1().Nodes().List(wctx, metav1.ListOptions{Limit: 1})
		}
		if err == nil {
			return kubeconfig, nil
		}
		if sleep(wctx, 100*time.Millisecond) != nil {
			return "", fmt.Errorf("lifecycle's RBAC not in effect after 30s: %w", err)
		}
	}
}

// sleep waits for d or until ctx ends (then it returns ctx's error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
