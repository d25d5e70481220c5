package kubetest_test

import (
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
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

	// A ServiceAccount's kubeconfig, for programs run as that account.
	saPath, err := c.ServiceAccountKubeconfig(t.Context(), ns.Name, "app", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	saCfg, err := clientcmd.BuildConfigFromFlags("", saPath)
	if err != nil {
		t.Fatal(err)
	}
	saCS, err := kubernetes.NewForConfig(saCfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := saCS.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview with the ServiceAccount kubeconfig: %v", err)
	}
	if want := "system:serviceaccount:" + ns.Name + ":app"; review.Status.UserInfo.Username != want {
		t.Errorf("the ServiceAccount kubeconfig authenticates as %q, want %q", review.Status.UserInfo.Username, want)
	}

	stop()
	stopped = true
	if err := c.APIServerExited(); err == nil {
		t.Fatal("APIServerExited after stop = nil, want the exit")
	}
}
