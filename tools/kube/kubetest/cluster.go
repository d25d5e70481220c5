// Package kubetest runs a real Kubernetes control plane for tests: etcd
// from Debian's etcd-server package and a kube-apiserver built from
// k8s.io/kubernetes (KubernetesVersion) by tools/kube-apiserver-build, on
// free loopback ports with generated certificates. It is what nodesmith's
// Kubernetes adapters are tested against: real admission, validation,
// RBAC, server-side apply, resource versions and watches, no fakes.
//
// There is no controller-manager, scheduler or kubelet: objects are stored
// and validated, but nothing acts on them (no Pods from Deployments, no
// default ServiceAccount tokens, namespaces are never finalized).
//
//	c := kubetest.Start(t)          // skips under -short
//	cs := c.Clientset(t)
//	ns := c.Namespace(t)            // a fresh namespace per test
//	cfg := c.ServiceAccountConfig(t, ns, "lifecycle") // RBAC as a pod would see it
//	c.ApplyRBAC(ctx, objs, ns)      // a rendering's ServiceAccounts and RBAC, moved to ns
//	path, err := c.ServiceAccountKubeconfig(ctx, ns, "lifecycle", time.Hour) // for --kubeconfig
//
// Starting a cluster takes seconds; start one per top-level test and use
// subtests with their own namespaces. The kube-apiserver binary is built
// once per machine into the user cache directory (`make kube-apiserver`
// does it ahead of `make test`).
package kubetest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// EtcdPackage is the Debian package that provides etcd.
const EtcdPackage = "etcd-server"

// Timeouts of the start-up, generous for a loaded two-core machine.
const (
	etcdReadyTimeout      = 60 * time.Second
	apiServerReadyTimeout = 3 * time.Minute
	stopGrace             = 10 * time.Second
	startAttempts         = 3
)

// Cluster is a running etcd and kube-apiserver, stopped when the test that
// started it ends.
type Cluster struct {
	// Kubeconfig is the path of a kubeconfig file for the admin user, for
	// code that loads kubeconfig files (or kubectl while debugging).
	Kubeconfig string
	// Host is kube-apiserver's URL (https://127.0.0.1:<port>).
	Host string
	// EtcdURL is etcd's client URL.
	EtcdURL string

	pki       *pki
	etcd      *process
	apiServer *process
}

// Start runs etcd and kube-apiserver for the test and waits until the API
// server is ready (/readyz). It skips the test under -short and fails it
// when etcd (EtcdPackage) is not installed or kube-apiserver cannot be
// built. Both processes are stopped with t.Cleanup; their logs are printed
// when the test fails.
func Start(t testing.TB) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("kubetest: skipping a test against a real kube-apiserver under -short")
	}
	etcdBin := EtcdBinary(t)
	apiServerBin, err := EnsureAPIServer(t.Context(), t.Logf)
	if err != nil {
		t.Fatalf("kubetest: kube-apiserver %s is unavailable: %v", KubernetesVersion, err)
	}

	dir := t.TempDir()
	p, err := newPKI(dir)
	if err != nil {
		t.Fatalf("kubetest: generating certificates: %v", err)
	}
	c := &Cluster{pki: p}

	c.etcd, c.EtcdURL, err = startEtcd(t.Context(), etcdBin, dir)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	t.Cleanup(func() {
		c.etcd.stop(stopGrace)
		if t.Failed() {
			t.Logf("kubetest: etcd log (end):\n%s", c.etcd.logTail(8000))
		}
	})

	c.apiServer, c.Host, err = startAPIServer(t.Context(), apiServerBin, dir, c.EtcdURL, p)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	t.Cleanup(func() {
		c.apiServer.stop(stopGrace)
		if t.Failed() {
			t.Logf("kubetest: kube-apiserver log (end):\n%s", c.apiServer.logTail(16000))
		}
	})

	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := c.writeKubeconfig(); err != nil {
		t.Fatalf("kubetest: writing kubeconfig: %v", err)
	}
	return c
}

// EtcdBinary finds etcd, failing the test (skipping it under -short) when
// the etcd-server package is not installed.
func EtcdBinary(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd"
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p
	}
	if testing.Short() {
		t.Skipf("kubetest: etcd not found; install the Debian package %s to run this test", EtcdPackage)
	}
	t.Fatalf("kubetest: etcd not found: install the Debian package %s (apt-get install %s; `make test-deps` does)", EtcdPackage, EtcdPackage)
	return ""
}

// RESTConfig returns a new admin configuration (user kubetest-admin in
// group system:masters, which RBAC lets do anything). Callers may modify
// it.
func (c *Cluster) RESTConfig() *rest.Config {
	return &rest.Config{
		Host: c.Host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   c.pki.caPEM,
			CertData: c.pki.adminCertPEM,
			KeyData:  c.pki.adminKey,
		},
		// Tests issue bursts of requests; client-go's default 5 QPS
		// would make them slow, not more realistic.
		QPS:   200,
		Burst: 400,
	}
}

// Clientset returns an admin clientset.
func (c *Cluster) Clientset(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatalf("kubetest: clientset: %v", err)
	}
	return cs
}

// Namespace creates a namespace with a generated name ("kubetest-xxxxx")
// and returns its name. Namespaces are not deleted (without a
// controller-manager they would stay Terminating); they go with the
// cluster.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	ns, err := c.Clientset(t).CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kubetest-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: creating a namespace: %v", err)
	}
	return ns.Name
}

// ServiceAccountConfig returns a configuration that authenticates as the
// ServiceAccount namespace/name with a bound token from the TokenRequest
// API, as a pod's projected token would: RBAC applies to it exactly as in
// a cluster. The ServiceAccount is created when it does not exist.
func (c *Cluster) ServiceAccountConfig(t testing.TB, namespace, name string) *rest.Config {
	t.Helper()
	cfg, err := c.serviceAccountConfig(t.Context(), namespace, name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func (c *Cluster) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.pki.caPEM}
	cfg.AuthInfos[adminUser] = &clientcmdapi.AuthInfo{ClientCertificateData: c.pki.adminCertPEM, ClientKeyData: c.pki.adminKey}
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: adminUser, Namespace: metav1.NamespaceDefault}
	cfg.CurrentContext = "kubetest"
	return clientcmd.WriteToFile(*cfg, c.Kubeconfig)
}

// startEtcd runs a single-member etcd on free loopback ports, retrying
// with other ports when one was taken between choosing and binding it.
func startEtcd(ctx context.Context, bin, dir string) (*process, string, error) {
	var lastErr error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		data := filepath.Join(dir, "etcd-data")
		if err := os.RemoveAll(data); err != nil {
			return nil, "", err
		}
		clientURL := "http://" + freeAddr()
		peerURL := "http://" + freeAddr()
		args := []string{
			"--name=kubetest",
			"--data-dir=" + data,
			"--listen-client-urls=" + clientURL,
			"--advertise-client-urls=" + clientURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=kubetest=" + peerURL,
			"--initial-cluster-state=new",
			"--logger=zap",
			"--log-outputs=stderr",
			"--log-level=warn",
		}
		p, err := startProcess("etcd", bin, args, filepath.Join(dir, fmt.Sprintf("etcd-%d.log", attempt)))
		if err != nil {
			return nil, "", err
		}
		err = waitReady(ctx, p, etcdReadyTimeout, func(ctx context.Context) error {
			return getOK(ctx, http.DefaultClient, clientURL+"/health", `"health":"true"`)
		})
		if err == nil {
			return p, clientURL, nil
		}
		p.stop(stopGrace)
		lastErr = fmt.Errorf("etcd did not become healthy: %w\netcd log:\n%s", err, p.logTail(4000))
		if !portConflict(p) {
			break
		}
	}
	return nil, "", lastErr
}

// startAPIServer runs kube-apiserver against etcdURL and waits for /readyz.
func startAPIServer(ctx context.Context, bin, dir, etcdURL string, p *pki) (*process, string, error) {
	client, err := adminHTTPClient(p)
	if err != nil {
		return nil, "", err
	}
	var lastErr error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		addr := freeAddr()
		_, port, _ := net.SplitHostPort(addr)
		host := "https://" + addr
		args := []string{
			"--etcd-servers=" + etcdURL,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port=" + port,
			"--cert-dir=" + filepath.Join(dir, "apiserver-certs"),
			"--tls-cert-file=" + p.servingCertFile,
			"--tls-private-key-file=" + p.servingKeyFile,
			"--client-ca-file=" + p.caFile,
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + p.saPublicFile,
			"--service-account-signing-key-file=" + p.saPrivateFile,
			"--service-cluster-ip-range=" + serviceClusterIPRange,
			"--authorization-mode=RBAC",
			// A loopback advertise address is invalid in Endpoints; with
			// no kubelets there is nothing to reconcile anyway.
			"--endpoint-reconciler-type=none",
			// Fewer moving parts on a small machine; tests do not
			// exercise API priority and fairness.
			"--enable-priority-and-fairness=false",
			"--profiling=false",
			"--v=1",
		}
		proc, err := startProcess("kube-apiserver", bin, args, filepath.Join(dir, fmt.Sprintf("kube-apiserver-%d.log", attempt)))
		if err != nil {
			return nil, "", err
		}
		err = waitReady(ctx, proc, apiServerReadyTimeout, func(ctx context.Context) error {
			return getOK(ctx, client, host+"/readyz", "ok")
		})
		if err == nil {
			return proc, host, nil
		}
		proc.stop(stopGrace)
		lastErr = fmt.Errorf("kube-apiserver did not become ready: %w\nkube-apiserver log:\n%s", err, proc.logTail(8000))
		if !portConflict(proc) {
			break
		}
	}
	return nil, "", lastErr
}

func adminHTTPClient(p *pki) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.caPEM) {
		return nil, errors.New("parsing the generated CA")
	}
	cert, err := tls.X509KeyPair(p.adminCertPEM, p.adminKey)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}}, nil
}

// waitReady polls check until it succeeds, the process exits or the
// timeout passes.
func waitReady(ctx context.Context, p *process, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		attemptCtx, cancelAttempt := context.WithTimeout(ctx, 5*time.Second)
		last = check(attemptCtx)
		cancelAttempt()
		if last == nil {
			return nil
		}
		select {
		case <-p.exited():
			return p.exitError()
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s: %w", timeout, last)
		case <-tick.C:
		}
	}
}

func getOK(ctx context.Context, client *http.Client, url, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, tail(strings.TrimSpace(string(body)), 2000))
	}
	return nil
}

// freeAddr returns a loopback address whose port was free a moment ago.
// Another process may take it before the child binds it; callers retry.
func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		// Practically impossible on loopback; let the child's bind fail
		// visibly rather than panic here.
		return "127.0.0.1:1"
	}
	defer l.Close()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
}

func portConflict(p *process) bool {
	return strings.Contains(p.logTail(64<<10), "address already in use")
}
