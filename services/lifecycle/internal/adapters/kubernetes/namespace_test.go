package kubernetes_test

import (
	"testing"

	kube "github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/kubernetes"
)

// The Deployment gives lifecycle POD_NAMESPACE (downward API) for its
// Lease, status ConfigMap and Events: it wins over the service account
// file, which a process given --kubeconfig instead of a pod's token lacks.
func TestDefaultNamespaceFromPodNamespace(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "nodesmith")
	if got := kube.DefaultNamespace(); got != "nodesmith" {
		t.Errorf("DefaultNamespace() = %q, want POD_NAMESPACE's nodesmith", got)
	}
	t.Setenv("POD_NAMESPACE", "")
	if got := kube.DefaultNamespace(); got == "" {
		t.Error("DefaultNamespace() is empty without POD_NAMESPACE")
	}
}
