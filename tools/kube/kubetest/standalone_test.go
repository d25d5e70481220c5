package kubetest_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
)

// TestStartStandalone runs the control plane outside kubetest.Start (as
// the chaos harness does): it serves through both the REST config and the
// kubeconfig file, and stop ends kube-apiserver.
func TestStartStandalone(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	c, stop, err := kubetest.StartStandalone(t.Context(), t.TempDir(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	if err := c.APIServerExited(); err != nil {
		t.Fatalf("APIServerExited on a running cluster = %v, want nil", err)
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "standalone"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	fromFile, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	csFile, err := kubernetes.NewForConfig(fromFile)
	if err != nil {
		t.Fatal(err)
	}
	got, err := csFile.CoreV1().Namespaces().Get(t.Context(), ns.Name, metav1.GetOptions{})
	if err != nil || got.UID != ns.UID {
		t.Fatalf("namespace through the kubeconfig file: %v, %v; want uid %s", got, err, ns.UID)
	}

	stop()
	stopped = true
	if err := c.APIServerExited(); err == nil {
		t.Fatal("APIServerExited after stop = nil, want the exit")
	}
}
