package manifestrun

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/nodesmith/nodesmith/libs/command"
	"github.com/nodesmith/nodesmith/proto/externalgrpc"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
	"github.com/nodesmith/nodesmith/tools/kube/manifests"
)

// Deviations from the manifests. Besides the address and path rewrite
// (pod.rewrite, pods_test.go), these are the only differences between what
// runs here and what the prod overlay deploys:
//
//   - cloud-adapter: NODESMITH_TENCENT_ENDPOINT and NODESMITH_TENCENT_SCHEME
//     point it at the CVM emulator (tools/cvmemu) instead of Tencent Cloud.
//     This is the one deliberate deviation in what a service is told.
//   - lifecycle: NODESMITH_KUBECONFIG is a kubeconfig for its
//     ServiceAccount (a bound token from the TokenRequest API, the rendered
//     RBAC applied). In a pod, client-go's in-cluster configuration reads
//     the token the kubelet mounts at the fixed path
//     /var/run/secrets/kubernetes.io/serviceaccount, which no root prefix
//     can move (nor the KUBERNETES_SERVICE_* variables the kubelet adds);
//     the kubeconfig carries the same identity. Its namespace comes from
//     POD_NAMESPACE, as the Deployment sets it.
//   - cluster-autoscaler is not run (its image is not built here): the test
//     plays it, with the client certificate, CA bundle and address of its
//     rendered cloud-config, read from its materialised mounts.
//   - cert-manager is played by issueCertificates (certs_test.go);
//     PersistentVolumeClaims are empty directories; pods' files are
//     written 0600 (the test's user runs every process); HOSTNAME is the
//     pod's name, as the container runtime sets it; a container that exits
//     is restarted, as the kubelet does (reported; see proc).
func overrides(c *corev1.Container, emulator, lifecycleKubeconfig string) []corev1.EnvVar {
	switch c.Name {
	case "cloud-adapter":
		return []corev1.EnvVar{
			{Name: "NODESMITH_TENCENT_ENDPOINT", Value: emulator},
			{Name: "NODESMITH_TENCENT_SCHEME", Value: "http"},
		}
	case "lifecycle":
		return []corev1.EnvVar{{Name: "NODESMITH_KUBECONFIG", Value: lifecycleKubeconfig}}
	}
	return nil
}

// binaryOf maps a container image (its tag ignored) to the binary that is
// its entrypoint: ghcr.io/nodesmith/<service> (the Dockerfile's
// ENTRYPOINT, the service) and nats (/nats-server).
func binaryOf(image string, bins map[string]string) (string, bool) {
	name, _, _ := strings.Cut(image, ":")
	switch {
	case name == "nats":
		return bins["nats-server"], true
	case strings.HasPrefix(name, "ghcr.io/nodesmith/"):
		b, ok := bins[strings.TrimPrefix(name, "ghcr.io/nodesmith/")]
		return b, ok
	}
	return "", false
}

// TestProdManifestsRun renders deploy/kustomize/overlays/prod and runs it
// on this machine: 3 nats-servers from the rendered nats.conf, every
// replica of every service (built from services/*/cmd/*) with exactly its
// container's command, args and environment and its mounts, lifecycle
// against a real kube-apiserver under the rendered RBAC, the cloud adapter
// against the CVM emulator. Then: every probe answers 200, REST answers
// over HTTPS to the rendered tokens, every service is connected to NATS
// (as its own NKey identity when the rendering has them), no service warns
// of an unknown NODESMITH_* variable, and a scale-up through Cluster
// Autoscaler's mTLS gRPC creates VMs in the emulator.
func TestProdManifestsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the prod manifests: NATS cluster, kube-apiserver, 8 service processes (skipped under -short)")
	}
	began := time.Now()
	repo := repoRoot(t)
	dir := t.TempDir()

	objs := renderProd(t, repo, dir)
	r := index(t, objs)
	bins := buildBinaries(t, repo, mkdir(t, dir, "bin"))
	t.Logf("rendered and built in %s", time.Since(began).Round(time.Millisecond))

	// Kubernetes: the rendered namespace and RBAC, for real.
	kc := kubetest.Start(t)
	cs := kc.Clientset(t)
	nsLabels := map[string]string{}
	for _, o := range r.ofKind("Namespace") {
		nsLabels = o.GetLabels()
	}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.namespace, Labels: nsLabels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.ApplyRBAC(t.Context(), objs, r.namespace); err != nil {
		t.Fatal(err)
	}

	// The cloud: the emulator, knowing the rendered credentials.
	emuCfg := cvmemu.DefaultConfig()
	emuCfg.Credentials = map[string]string{}
	for name, s := range r.secrets {
		if strings.HasPrefix(name, "cloud-credentials-") {
			id := strings.TrimSpace(string(s.Data["secretId"]))
			emuCfg.Credentials[id] = strings.TrimSpace(string(s.Data["secretKey"]))
		}
	}
	if len(emuCfg.Credentials) == 0 {
		t.Fatal("the rendering has no cloud-credentials-* Secret")
	}
	emuCfg.BootDelay = 500 * time.Millisecond
	emu, err := cvmemu.Start("127.0.0.1:0", emuCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { emu.Close() })

	// The pods.
	ports := newPortAllocator()
	pods := r.pods(t, mkdir(t, dir, "pods"), ports)
	addrs := r.addresses(t, pods)
	issueCertificates(t, r, addrs.loopback)
	logDir := mkdir(t, dir, "logs")
	var all []running
	t.Cleanup(func() {
		if t.Failed() {
			for _, x := range all {
				t.Logf("pod %s container %s, log (end):\n%s", x.pod.name, x.c.Name, tail(x.proc.log.String(), 4000))
			}
		}
	})
	kubeconfigs := map[string]string{}
	kubeconfigOf := func(sa string) string {
		if kubeconfigs[sa] == "" {
			path, err := kc.ServiceAccountKubeconfig(t.Context(), r.namespace, sa, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			kubeconfigs[sa] = path
		}
		return kubeconfigs[sa]
	}

	var caPod *pod
	startPod := func(p *pod) []running {
		var out []running
		for i := range p.spec.Containers {
			c := &p.spec.Containers[i]
			p.materialize(t, r, c, addrs)
			bin, ok := binaryOf(c.Image, bins)
			if !ok {
				if p.workload == "cluster-autoscaler" {
					caPod = p
					continue
				}
				t.Fatalf("pod %s: no binary for image %s", p.name, c.Image)
			}
			if len(c.Command) > 0 {
				t.Fatalf("pod %s: container %s sets command %v: this test runs image entrypoints only", p.name, c.Name, c.Command)
			}
			env := p.env(t, r, c)
			vars := map[string]string{}
			for _, e := range env {
				vars[e.Name] = e.Value
			}
			var args []string
			for _, a := range c.Args {
				args = append(args, p.rewrite(c, addrs, expand(a, vars)))
			}
			for i := range env {
				env[i].Value = p.rewrite(c, addrs, env[i].Value)
			}
			kubeconfig := ""
			if c.Name == "lifecycle" {
				kubeconfig = kubeconfigOf(p.spec.ServiceAccountName)
			}
			for _, o := range overrides(c, emu.Endpoint(), kubeconfig) {
				env = slices.DeleteFunc(env, func(e corev1.EnvVar) bool { return e.Name == o.Name })
				env = append(env, o)
			}
			var envList []string
			for _, e := range env {
				envList = append(envList, e.Name+"="+e.Value)
			}
			pr := start(t, p.name, c.Name, bin, args, envList, p.root, logDir)
			out = append(out, running{p, *c, pr})
			all = append(all, running{p, *c, pr})
		}
		return out
	}
	waitReady := func(rs []running, timeout time.Duration) {
		t.Helper()
		for _, x := range rs {
			checkProbes(t, x.pod, &x.c, x.proc, timeout)
		}
	}

	// NATS first (the services would wait for it anyway), then the rest.
	var natsRunning []running
	for _, p := range pods {
		if p.workload == "nats" {
			natsRunning = append(natsRunning, startPod(p)...)
		}
	}
	if len(natsRunning) == 0 {
		t.Fatal("the rendering runs no nats container")
	}
	waitReady(natsRunning, 2*time.Minute)
	t.Logf("%d NATS servers ready after %s", len(natsRunning), time.Since(began).Round(time.Millisecond))
	var services []running
	for _, p := range pods {
		if p.workload != "nats" {
			services = append(services, startPod(p)...)
		}
	}
	if caPod == nil {
		t.Fatal("the rendering has no cluster-autoscaler pod")
	}
	waitReady(services, 3*time.Minute)
	t.Logf("%d service containers ready after %s", len(services), time.Since(began).Round(time.Millisecond))
	restartsWhenReady := map[*proc]int{}
	for _, x := range all {
		restartsWhenReady[x.proc], _ = x.proc.restartCount()
	}

	// No service warns of an unknown NODESMITH_* variable (a misspelt
	// name in a manifest).
	checkNoUnknownEnv := func() {
		t.Helper()
		for _, x := range services {
			for line := range strings.SplitSeq(x.proc.log.String(), "\n") {
				if strings.Contains(line, command.UnknownEnvMessage) {
					t.Errorf("pod %s: %s", x.pod.name, line)
				}
			}
		}
	}
	checkNoUnknownEnv()

	t.Run("REST over HTTPS with the rendered tokens", func(t *testing.T) {
		checkREST(t, r, addrs)
	})
	t.Run("every service connected to NATS as itself", func(t *testing.T) {
		checkNATSIdentities(t, r, pods, services)
	})
	t.Run("one lifecycle leads through its Lease in the pod's namespace", func(t *testing.T) {
		checkLease(t, kc, r, pods)
	})
	t.Run("scale-up through Cluster Autoscaler's mTLS gRPC", func(t *testing.T) {
		checkScaleUp(t, r, caPod, addrs, emu)
	})

	// Still up, still healthy, still quiet about unknown variables; no
	// restart since all were ready. Restarts before that are reported: the
	// kubelet restarts a container that exits, so they do not fail the
	// test, but each is a crash a real start-up would show too.
	for _, x := range all {
		if err := x.proc.running(); err != nil {
			t.Error(err)
		}
		checkProbes(t, x.pod, &x.c, x.proc, 30*time.Second)
		n, last := x.proc.restartCount()
		if n > restartsWhenReady[x.proc] {
			t.Errorf("pod %s container %s restarted after every pod was ready (last exit: %v); its log:\n%s", x.pod.name, x.c.Name, last, tail(x.proc.log.String(), 6000))
		} else if n > 0 {
			t.Logf("NOTE: pod %s container %s exited %d time(s) during start-up and was restarted as the kubelet would (last exit: %v); its log:\n%s", x.pod.name, x.c.Name, n, last, tail(x.proc.log.String(), 3000))
		}
	}
	if !t.Failed() {
		checkNoUnknownEnv()
	}
	t.Logf("done in %s", time.Since(began).Round(time.Millisecond))
}

// running is one started container.
type running struct {
	pod  *pod
	c    corev1.Container
	proc *proc
}

func mkdir(t *testing.T, parts ...string) string {
	t.Helper()
	d := filepath.Join(parts...)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "deploy", "kustomize", "overlays", "prod", "kustomization.yaml")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("deploy/kustomize not found above %s", wd)
		}
	}
}

// renderProd renders overlays/prod from a copy of deploy/kustomize (any
// generated/ directory a developer's `make secrets` left is not copied:
// the test never reads real secrets) into which the per-install Secrets
// are generated first.
func renderProd(t *testing.T, repo, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := filepath.Join(dir, "kustomize")
	err := filepath.WalkDir(filepath.Join(repo, "deploy", "kustomize"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Join(repo, "deploy", "kustomize"), p)
		if d.IsDir() {
			if d.Name() == "generated" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(k, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(k, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	generateInstallSecrets(t, k)
	objs, err := manifests.Render(filepath.Join(k, "overlays", "prod"))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// checkProbes polls every httpGet probe (startup, liveness, readiness) of
// container c on its loopback port until it answers 200, failing the test
// at timeout with the last answer, or at once with the log if the process
// exits.
func checkProbes(t *testing.T, p *pod, c *corev1.Container, pr *proc, timeout time.Duration) {
	t.Helper()
	probes := map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe}
	for _, kind := range []string{"startup", "readiness", "liveness"} {
		pb := probes[kind]
		if pb == nil {
			continue
		}
		if pb.HTTPGet == nil {
			t.Fatalf("pod %s container %s: %s probe is not httpGet (not supported by this test)", p.name, c.Name, kind)
		}
		cp, ok := p.targetPort(pb.HTTPGet.Port, 0)
		if !ok {
			t.Fatalf("pod %s container %s: %s probe port %s is no container port", p.name, c.Name, kind, pb.HTTPGet.Port.String())
		}
		scheme := "http"
		client := &http.Client{Timeout: 5 * time.Second}
		if pb.HTTPGet.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
			// The kubelet does not verify probe certificates either.
			client.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
		}
		url := fmt.Sprintf("%s://127.0.0.1:%d%s", scheme, p.ports[cp], pb.HTTPGet.Path)
		deadline := time.Now().Add(timeout)
		last := ""
		for {
			if err := pr.running(); err != nil {
				t.Fatal(err)
			}
			resp, err := client.Get(url)
			if err == nil {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 2000))
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
				last = fmt.Sprintf("%d %s", resp.StatusCode, b)
			} else {
				last = err.Error()
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s container %s: %s probe %s (container port %d) never answered 200: %s\nthe container's log:\n%s",
					p.name, c.Name, kind, url, cp, last, tail(pr.log.String(), 8000))
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
}

// serviceEndpoint is the first loopback endpoint of a DNS name and port.
func serviceEndpoint(t *testing.T, addrs addresses, hostPort string) string {
	t.Helper()
	eps := addrs[hostPort]
	if len(eps) == 0 {
		t.Fatalf("%s resolves to no pod", hostPort)
	}
	return "127.0.0.1:" + strconv.Itoa(eps[0].port)
}

// checkREST calls the gateway's REST API as an operator in the cluster
// would: https://api-gateway.<namespace>.svc:<rest port>, trusting the CA of
// the REST certificate's Secret, with each rendered token.
func checkREST(t *testing.T, r *rendering, addrs addresses) {
	var restPort int32
	for _, s := range r.services {
		if s.Name == "api-gateway" {
			for _, sp := range s.Spec.Ports {
				if sp.Name == "rest" {
					restPort = sp.Port
				}
			}
		}
	}
	if restPort == 0 {
		t.Fatal("Service api-gateway has no port named rest")
	}
	host := "api-gateway." + r.namespace + ".svc"
	target := serviceEndpoint(t, addrs, fmt.Sprintf("%s:%d", host, restPort))
	tlsSecret, ok := r.secrets["api-gateway-rest-tls"]
	if !ok {
		t.Fatal("no Secret api-gateway-rest-tls (the REST certificate) in the rendering")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(tlsSecret.Data["ca.crt"]) {
		t.Fatal("api-gateway-rest-tls: no CA certificate")
	}
	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, target)
			},
		},
	}
	tokens, ok := r.secretNamed("api-gateway-rest-tokens")
	if !ok {
		t.Fatal("no Secret api-gateway-rest-tokens in the rendering")
	}
	get := func(token string) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, fmt.Sprintf("https://%s:%d/api/v1/status", host, restPort), nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET /api/v1/status over HTTPS: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4000))
		return resp.StatusCode, string(b)
	}
	for _, key := range []string{"admin", "readonly"} {
		token := firstToken(tokens.Data[key])
		if token == "" {
			t.Fatalf("api-gateway-rest-tokens: no %s token", key)
		}
		if code, body := get(token); code != http.StatusOK {
			t.Errorf("GET /api/v1/status with the %s token: %d %s", key, code, body)
		}
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("GET /api/v1/status without a token: %d, want 401", code)
	}
	if code, _ := get("not-a-token-of-this-install"); code != http.StatusUnauthorized {
		t.Errorf("GET /api/v1/status with a wrong token: %d, want 401", code)
	}
}

// firstToken is the first token of a token file (one per line; comments
// and blank lines skipped).
func firstToken(b []byte) string {
	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			return line
		}
	}
	return ""
}

type connz struct {
	Connections []struct {
		Name string `json:"name"`
		// AuthorizedUser is the NKey for an NKey user.
		AuthorizedUser string `json:"authorized_user"`
		TLSVersion     string `json:"tls_version"`
	} `json:"connections"`
}

// checkNATSIdentities asks every NATS server who is connected (monitor
// port, /connz?auth=true): each service's connections carry its name and,
// when the rendering holds the services' NKey public keys (Secret
// nats-users, one key per service), that service's own NKey, and no
// connection is anonymous; with TLS in the configuration, every
// connection uses it.
func checkNATSIdentities(t *testing.T, r *rendering, pods []*pod, services []running) {
	// The identities are required once the NATS servers are configured
	// with NKey users (the rendered nats.conf names them); until then the
	// services are checked by connection name.
	var users *corev1.Secret
	natsConf := ""
	for _, p := range pods {
		if p.workload == "nats" {
			for _, v := range p.spec.Volumes {
				if v.ConfigMap != nil {
					for _, d := range r.configMaps[v.ConfigMap.Name].Data {
						natsConf += d
					}
				}
			}
			break
		}
	}
	// Client TLS is required when the rendered configuration has a
	// certificate (components/nats-tls).
	requireTLS := strings.Contains(natsConf, "cert_file")
	if strings.Contains(natsConf, "nkey") {
		var ok bool
		if users, ok = r.secretNamed("nats-users"); !ok {
			t.Fatal("nats.conf names NKey users but the rendering has no Secret nats-users")
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		byName := map[string][]string{} // connection name -> nkeys
		var anonymous, plaintext []string
		for _, p := range pods {
			if p.workload != "nats" {
				continue
			}
			cp, ok := p.targetPort(intstr.FromString("monitor"), 0)
			if !ok {
				t.Fatalf("pod %s has no port named monitor", p.name)
			}
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/connz?auth=true&limit=1024", p.ports[cp]))
			if err != nil {
				t.Fatal(err)
			}
			var cz connz
			err = json.NewDecoder(resp.Body).Decode(&cz)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cz.Connections {
				byName[c.Name] = append(byName[c.Name], c.AuthorizedUser)
				if c.AuthorizedUser == "" {
					anonymous = append(anonymous, p.name+": "+c.Name)
				}
				if requireTLS && c.TLSVersion == "" {
					plaintext = append(plaintext, p.name+": "+c.Name)
				}
			}
		}
		var problems []string
		replicas := map[string]int{}
		for _, x := range services {
			replicas[x.c.Name]++
		}
		for svc, n := range replicas {
			keys := byName[svc]
			if len(keys) < n {
				problems = append(problems, fmt.Sprintf("%s: %d connections named %q, want at least one per replica (%d)", svc, len(keys), svc, n))
				continue
			}
			if users == nil {
				continue
			}
			want := strings.TrimSpace(string(users.Data[svc]))
			if want == "" {
				problems = append(problems, fmt.Sprintf("Secret nats-users has no key %s", svc))
			}
			for _, k := range keys {
				if k != want {
					problems = append(problems, fmt.Sprintf("%s connected with NKey %q, want its own %q", svc, k, want))
				}
			}
		}
		if users != nil && len(anonymous) > 0 {
			problems = append(problems, fmt.Sprintf("connections without an identity: %v", anonymous))
		}
		if len(plaintext) > 0 {
			problems = append(problems, fmt.Sprintf("nats.conf has TLS but these connections are plaintext: %v", plaintext))
		}
		if len(problems) == 0 {
			t.Logf("NATS connections by name and NKey: %v (TLS required: %v)", byName, requireTLS)
			if users == nil {
				t.Logf("the rendered nats.conf has no NKey users: services checked by connection name only")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("NATS connections: %s (all: %v)", strings.Join(problems, "; "), byName)
		}
		time.Sleep(time.Second)
	}
}

// checkScaleUp plays Cluster Autoscaler: its rendered cloud-config (read
// from its pod's materialised mount, path from its --cloud-config
// argument) gives the gateway's address, the client certificate and key
// and the CA bundle; the call goes to the address's endpoint with TLS
// checking the address's host, as CA's externalgrpc client does. A
// scale-up of the first node group must create VMs in the emulator.
func checkScaleUp(t *testing.T, r *rendering, caPod *pod, addrs addresses, emu *cvmemu.Server) {
	var c *corev1.Container
	for i := range caPod.spec.Containers {
		if caPod.spec.Containers[i].Name == "cluster-autoscaler" {
			c = &caPod.spec.Containers[i]
		}
	}
	if c == nil {
		t.Fatal("no cluster-autoscaler container")
	}
	var orig string // --cloud-config as rendered
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--cloud-config="); ok {
			orig = v
		}
	}
	if orig == "" {
		t.Fatal("cluster-autoscaler has no --cloud-config")
	}
	// The rendered file, for the gateway's host as CA sees it.
	var rendered string
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(orig, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range caPod.spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				rendered = r.configMaps[v.ConfigMap.Name].Data[rel]
			}
		}
	}
	var renderedCfg struct {
		Address string `json:"address"`
	}
	if err := yaml.Unmarshal([]byte(rendered), &renderedCfg); err != nil || renderedCfg.Address == "" {
		t.Fatalf("CA's rendered cloud-config %s has no address (%v):\n%s", orig, err, rendered)
	}
	host, _, err := net.SplitHostPort(renderedCfg.Address)
	if err != nil {
		t.Fatal(err)
	}
	// The file CA reads: paths under its pod root, the address on loopback.
	b, err := os.ReadFile(caPod.rewrite(c, addrs, orig))
	if err != nil {
		t.Fatalf("CA's cloud-config: %v", err)
	}
	var cfg struct {
		Address string `json:"address"`
		Cert    string `json:"cert"`
		Key     string `json:"key"`
		CACert  string `json:"cacert"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Cert == "" || cfg.Key == "" || cfg.CACert == "" {
		t.Fatalf("the prod cloud-config has no cert/key/cacert (mTLS):\n%s", b)
	}
	cert, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
	if err != nil {
		t.Fatalf("CA's client certificate: %v", err)
	}
	caPEM, err := os.ReadFile(cfg.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("%s: no certificate", cfg.CACert)
	}
	conn, err := grpc.NewClient(cfg.Address, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12,
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cp := externalgrpc.NewCloudProviderClient(conn)
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(t.Context(), 5*time.Second) }
	var groups *externalgrpc.NodeGroupsResponse
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := call()
		groups, err = cp.NodeGroups(ctx, &externalgrpc.NodeGroupsRequest{})
		cancel()
		if err == nil && len(groups.GetNodeGroups()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("NodeGroups over mTLS at %s (host %s): %v %v", cfg.Address, host, groups, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	g := groups.GetNodeGroups()[0]
	const delta = 2
	ctx, cancel := call()
	_, err = cp.NodeGroupIncreaseSize(ctx, &externalgrpc.NodeGroupIncreaseSizeRequest{Id: g.GetId(), Delta: delta})
	cancel()
	if err != nil {
		t.Fatalf("NodeGroupIncreaseSize(%s, %d): %v", g.GetId(), delta, err)
	}
	deadline = time.Now().Add(time.Minute)
	for {
		vms := emu.ListVMs()
		ctx, cancel := call()
		nodes, nerr := cp.NodeGroupNodes(ctx, &externalgrpc.NodeGroupNodesRequest{Id: g.GetId()})
		cancel()
		if len(vms) >= delta && nerr == nil && len(nodes.GetInstances()) >= delta {
			for _, vm := range vms {
				t.Logf("emulator: %s %s %s tags %v", vm.ID, vm.Zone, vm.State, vm.Tags)
			}
			for _, in := range nodes.GetInstances() {
				t.Logf("CA sees %s: %v", in.GetId(), in.GetStatus().GetInstanceState())
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after NodeGroupIncreaseSize(%s, %d): the emulator holds %d VMs, NodeGroupNodes: %v %v", g.GetId(), delta, len(vms), nodes, nerr)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkLease: lifecycle's leader election holds a Lease in the pods'
// namespace (POD_NAMESPACE), held by one of the lifecycle pods.
func checkLease(t *testing.T, kc *kubetest.Cluster, r *rendering, pods []*pod) {
	cs := kc.Clientset(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		leases, err := cs.CoordinationV1().Leases(r.namespace).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range leases.Items {
			holder := ""
			if l.Spec.HolderIdentity != nil {
				holder = *l.Spec.HolderIdentity
			}
			for _, p := range pods {
				if p.workload == "lifecycle" && strings.HasPrefix(holder, p.name+"_") {
					t.Logf("Lease %s/%s held by %s", l.Namespace, l.Name, holder)
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Lease in %s held by a lifecycle pod: %v", r.namespace, leases.Items)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
