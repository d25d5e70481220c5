package kubernetes_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/nodesmith/nodesmith/libs/testwait"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/clustertest"
	kube "github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/kubernetes"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
	"github.com/nodesmith/nodesmith/tools/kube/manifests"
)

// The ports.Cluster contract on a real kube-apiserver (one for the whole
// suite; each subtest starts from a cluster without Nodes), the adapter
// authenticated as lifecycle's ServiceAccount with the kustomize base's
// RBAC: what a pod may do, nothing more.
func TestClusterContract(t *testing.T) {
	c := kubetest.Start(t) // skips under -short
	admin := c.Clientset(t)
	ns := c.Namespace(t)
	objs, err := manifests.Render(filepath.Join("..", "..", "..", "..", "..", "deploy", "kustomize", "base"))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.ApplyRBAC(t.Context(), manifests.NewSet(objs).OfApp("lifecycle"), ns); err != nil || n == 0 {
		t.Fatalf("applying lifecycle's RBAC: %d objects, %v", n, err)
	}
	sa, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, ns, "lifecycle"))
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Run(t, func(t *testing.T) clustertest.Harness {
		clearNodes(t, admin)
		return clustertest.Harness{
			Cluster: kube.NewCluster(sa, quiet()),
			Put:     func(t *testing.T, n ports.Node) { putNode(t, admin, n) },
			Get: func(t *testing.T, name string) (ports.Node, bool) {
				n, err := admin.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return ports.Node{}, false
				}
				if err != nil {
					t.Fatal(err)
				}
				return kube.ToNode(n), true
			},
			Remove: func(t *testing.T, name string) {
				if err := admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
					t.Error(err)
				}
			},
		}
	})
}

// clearNodes deletes every Node and waits until none is listed (Nodes
// have no finalizers: deletion is immediate).
func clearNodes(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	if err := cs.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 30*time.Second, "no Node left after deleting them all", func() bool {
		l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items) == 0
	})
}

// putNode plays kubelet and the cluster's other writers: it creates the
// Node or replaces its labels, annotations and taints, then its status,
// each only when it differs (a write that changes nothing is no event).
func putNode(t *testing.T, cs kubernetes.Interface, want ports.Node) {
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			n, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: want.Name}, Spec: corev1.NodeSpec{ProviderID: want.ProviderID}}, metav1.CreateOptions{})
		}
		if err != nil {
			return err
		}
		var taints []corev1.Taint
		for _, x := range want.Taints {
			taints = append(taints, corev1.Taint{Key: x.Key, Value: x.Value, Effect: corev1.TaintEffect(x.Effect)})
		}
		have := kube.ToNode(n)
		if !clustertest.Equal(have, ports.Node{Name: have.Name, ProviderID: have.ProviderID, Ready: have.Ready, InternalIP: have.InternalIP,
			Labels: want.Labels, Annotations: want.Annotations, Taints: want.Taints}) {
			n.Labels, n.Annotations, n.Spec.Taints = want.Labels, want.Annotations, taints
			if n, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		if have := kube.ToNode(n); have.Ready == want.Ready && have.InternalIP == want.InternalIP {
			return nil
		}
		status := corev1.ConditionFalse
		if want.Ready {
			status = corev1.ConditionTrue
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "Test",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		n.Status.Addresses = nil
		if want.InternalIP != "" {
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: want.InternalIP}}
		}
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Errorf("putting Node %s: %v", want.Name, err)
	}
}
