package manifests_test

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/nodesmith/nodesmith/tools/kube/manifests"
)

// The four nodesmith services, which are also their container names.
var services = []string{"api-gateway", "lifecycle", "cloud-adapter", "hook-runner"}

const namespace = "nodesmith"

// rendering is one way to build deploy/kustomize: an overlay, or a
// composition of a base or overlay with components.
type rendering struct {
	name       string
	dir        string   // an overlay, rendered as is
	resources  []string // or a composition
	components []string
	// check asserts what this rendering promises beyond the common rules.
	check func(t *testing.T, s *manifests.Set)
}

func renderings(t *testing.T) []rendering {
	// A copy of deploy/kustomize with `make secrets` run in it: the
	// repository ships no per-install secret (see secrets_test.go).
	k := generatedKustomizeDir(t)
	overlay := func(name string) string { return filepath.Join(k, "overlays", name) }
	base := filepath.Join(k, "base")
	component := func(name string) string { return filepath.Join(k, "components", name) }
	return []rendering{
		{name: "overlays/dev", dir: overlay("dev"), check: checkDev},
		{name: "overlays/prod", dir: overlay("prod"), check: checkProd},
		{
			name: "base+mtls", resources: []string{base}, components: []string{component("secrets"), component("mtls")},
			check: checkMTLS,
		},
		{
			name: "base+servicemonitor", resources: []string{base}, components: []string{component("secrets"), component("servicemonitor")},
			check: checkServiceMonitor,
		},
		{
			name: "base+otel", resources: []string{base}, components: []string{component("secrets"), component("otel")},
			check: checkOTel,
		},
		{
			name: "base+servicemonitor+monitoring", resources: []string{base},
			components: []string{component("secrets"), component("servicemonitor"), component("monitoring")},
			check: func(t *testing.T, s *manifests.Set) {
				checkServiceMonitor(t, s)
				checkMonitoring(t, s)
			},
		},
		{
			name: "prod+servicemonitor+otel", resources: []string{overlay("prod")}, components: []string{component("servicemonitor"), component("otel")},
			check: func(t *testing.T, s *manifests.Set) {
				checkProd(t, s)
				checkServiceMonitor(t, s)
				checkOTel(t, s)
			},
		},
	}
}

func (r rendering) render(t *testing.T) *manifests.Set {
	t.Helper()
	var (
		objs []*unstructured.Unstructured
		err  error
	)
	if r.dir != "" {
		objs, err = manifests.Render(r.dir)
	} else {
		objs, err = manifests.Compose(t.TempDir(), namespace, r.resources, r.components)
	}
	if err != nil {
		t.Fatal(err)
	}
	return manifests.NewSet(objs)
}

// TestRenderings renders every overlay and the base with each component
// and checks the structural rules (manifests.Check) and what each
// rendering promises.
func TestRenderings(t *testing.T) {
	for _, r := range renderings(t) {
		t.Run(r.name, func(t *testing.T) {
			s := r.render(t)
			for _, err := range manifests.Check(s.Objects) {
				t.Error(err)
			}
			checkCommon(t, s)
			r.check(t, s)
		})
	}
}

// TestBaseNeedsSecrets: the base renders, and what it lacks on its own is
// exactly the Secrets an environment provides.
func TestBaseNeedsSecrets(t *testing.T) {
	objs, err := manifests.Render(filepath.Join(kustomizeDir(t), "base"))
	if err != nil {
		t.Fatal(err)
	}
	errs := manifests.Check(objs)
	if len(errs) == 0 {
		t.Fatal("the base alone passes the reference check; expected it to lack the environment's Secrets")
	}
	for _, err := range errs {
		if !strings.Contains(err.Error(), `Secret "`) {
			t.Errorf("base: %v", err)
		}
	}
}

// TestCheckCatchesViolations feeds Check a rendering broken in each way it
// must detect.
func TestCheckCatchesViolations(t *testing.T) {
	dev := renderings(t)[0]
	cases := []struct {
		name    string
		breakIt func(objs []*unstructured.Unstructured)
		want    string
	}{
		{"missing probe", func(objs []*unstructured.Unstructured) {
			container(objs, "Deployment", "lifecycle", func(c map[string]any) { delete(c, "readinessProbe") })
		}, "no readiness probe"},
		{"no memory limit", func(objs []*unstructured.Unstructured) {
			container(objs, "Deployment", "cloud-adapter", func(c map[string]any) {
				_ = unstructured.SetNestedField(c, map[string]any{"cpu": "1"}, "resources", "limits")
			})
		}, "no memory limit"},
		{"writable root", func(objs []*unstructured.Unstructured) {
			container(objs, "Deployment", "hook-runner", func(c map[string]any) {
				_ = unstructured.SetNestedField(c, false, "securityContext", "readOnlyRootFilesystem")
			})
		}, "readOnlyRootFilesystem is not true"},
		{"rbac wildcard", func(objs []*unstructured.Unstructured) {
			o := find(objs, "ClusterRole", "nodesmith-lifecycle")
			_ = unstructured.SetNestedSlice(o.Object, []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"nodes"}, "verbs": []any{"*"}}}, "rules")
		}, `wildcard "*" in verbs`},
		{"missing configmap", func(objs []*unstructured.Unstructured) {
			o := find(objs, "Deployment", "lifecycle")
			vols, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
			_ = unstructured.SetNestedField(vols[0].(map[string]any), "no-such-config", "configMap", "name")
			_ = unstructured.SetNestedSlice(o.Object, vols, "spec", "template", "spec", "volumes")
		}, `ConfigMap "no-such-config" is not in the rendering`},
		{"token for an unbound account", func(objs []*unstructured.Unstructured) {
			o := find(objs, "Deployment", "api-gateway")
			_ = unstructured.SetNestedField(o.Object, true, "spec", "template", "spec", "automountServiceAccountToken")
		}, "has no role bindings"},
		{"grace shorter than shutdown", func(objs []*unstructured.Unstructured) {
			o := find(objs, "Deployment", "hook-runner")
			_ = unstructured.SetNestedField(o.Object, int64(60), "spec", "template", "spec", "terminationGracePeriodSeconds")
		}, "must exceed the preStop sleep"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := dev.render(t)
			tc.breakIt(s.Objects)
			errs := manifests.Check(s.Objects)
			if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), tc.want) }) {
				t.Fatalf("Check did not report %q; got %v", tc.want, errs)
			}
		})
	}
}

// checkCommon: what every deployable rendering promises.
func checkCommon(t *testing.T, s *manifests.Set) {
	t.Helper()
	// CA dials the gateway's Service by the name in its cloud-config.
	cc := caCloudConfig(t, s)
	host, port, err := net.SplitHostPort(cc.Address)
	if err != nil {
		t.Fatalf("cloud-config address %q: %v", cc.Address, err)
	}
	if want := "api-gateway." + namespace + ".svc"; host != want {
		t.Errorf("cloud-config address host %q, want %q (the gateway Service)", host, want)
	}
	var svc corev1.Service
	mustInto(t, s, "Service", namespace, "api-gateway", &svc)
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "grpc" && port == "8086" && p.Port == 8086 }) {
		t.Errorf("cloud-config port %s is not the gateway Service's grpc port (%v)", port, svc.Spec.Ports)
	}
	if cc.GRPCTimeout == "" {
		t.Error("cloud-config sets no grpc_timeout")
	}
	// Every service reaches NATS through the client Service.
	for _, name := range services {
		w, c := workload(t, s, "Deployment", name)
		if v, _ := s.EnvValue(w, c, "NODESMITH_NATS_URL"); v != "nats://nats:4222" {
			t.Errorf("%s: NODESMITH_NATS_URL=%q, want the nats Service", name, v)
		}
	}
	if s.Get("Service", namespace, "nats") == nil || s.Get("Service", namespace, "nats-headless") == nil {
		t.Error("the NATS client and headless Services are missing")
	}
	checkNATSAuth(t, s)
	// Only lifecycle, CA and the node agent may talk to the Kubernetes API.
	for _, w := range workloads(t, s) {
		auto := w.Template.Spec.AutomountServiceAccountToken
		apiUser := slices.Contains([]string{"lifecycle", "cluster-autoscaler", "node-agent"}, w.Object.GetName())
		if apiUser != (auto == nil || *auto) {
			t.Errorf("%s: automountServiceAccountToken=%v", w.Name(), auto)
		}
	}
}

func checkDev(t *testing.T, s *manifests.Set) {
	insecure, tls := gatewayTLS(t, s)
	if !insecure || tls {
		t.Errorf("dev gateway: insecure=%v tls=%v, want plaintext", insecure, tls)
	}
	if insecure, tls := gatewayRESTTLS(t, s); !insecure || tls {
		t.Errorf("dev gateway REST: insecure=%v tls=%v, want an explicit --rest-insecure", insecure, tls)
	}
	if cc := caCloudConfig(t, s); cc.Cert != "" {
		t.Errorf("dev cloud-config has a client certificate %q but the gateway is plaintext", cc.Cert)
	}
	for _, w := range workloads(t, s) {
		if r := replicas(w.Object); r != 1 {
			t.Errorf("dev %s: %d replicas, want 1", w.Name(), r)
		}
	}
	if v := jsReplicas(t, s); v != "1" {
		t.Errorf("dev NODESMITH_JS_REPLICAS=%q, want 1 (one NATS server)", v)
	}
	conf := configMapData(t, s, "nats-config", "nats.conf")
	if strings.Contains(conf, "cluster {") {
		t.Error("dev nats.conf configures a cluster for a single server")
	}
}

func checkProd(t *testing.T, s *manifests.Set) {
	checkMTLS(t, s)
	checkNATSTLS(t, s)
	if v := jsReplicas(t, s); v != "3" {
		t.Errorf("prod NODESMITH_JS_REPLICAS=%q, want 3", v)
	}
	nats := find(s.Objects, "StatefulSet", "nats")
	if r := replicas(nats); r != 3 {
		t.Errorf("prod NATS replicas %d, want 3", r)
	}
	if !strings.Contains(configMapData(t, s, "nats-config", "nats.conf"), "cluster {") {
		t.Error("prod nats.conf has no cluster block")
	}
	if r := replicas(find(s.Objects, "Deployment", "lifecycle")); r != 2 {
		t.Errorf("prod lifecycle replicas %d, want 2 (leader + standby)", r)
	}
	if r := replicas(find(s.Objects, "Deployment", "api-gateway")); r < 2 {
		t.Errorf("prod api-gateway replicas %d, want at least 2", r)
	}
	for _, name := range []string{"cloud-adapter", "hook-runner"} {
		if s.Get("HorizontalPodAutoscaler", namespace, name) == nil {
			t.Errorf("prod: no HorizontalPodAutoscaler for %s", name)
		}
	}
	for _, name := range append(slices.Clone(services), "nats") {
		if s.Get("PodDisruptionBudget", namespace, name) == nil {
			t.Errorf("prod: no PodDisruptionBudget for %s", name)
		}
	}
	for _, w := range workloads(t, s) {
		// CA runs alone; a DaemonSet has one pod per Node by construction.
		if w.Object.GetName() == "cluster-autoscaler" || w.Object.GetKind() == "DaemonSet" {
			continue
		}
		if a := w.Template.Spec.Affinity; a == nil || a.PodAntiAffinity == nil {
			t.Errorf("prod %s: no pod anti-affinity", w.Name())
		}
	}
	checkNetworkPolicies(t, s)
}

// checkNetworkPolicies evaluates the prod policies the way a CNI would for
// the flows that matter.
func checkNetworkPolicies(t *testing.T, s *manifests.Set) {
	var pols []networkingv1.NetworkPolicy
	for _, o := range s.OfKind("NetworkPolicy") {
		var np networkingv1.NetworkPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &np); err != nil {
			t.Fatal(err)
		}
		pols = append(pols, np)
	}
	pod := func(name string) labels.Set {
		for _, w := range workloads(t, s) {
			if w.Object.GetName() == name {
				return w.Template.Labels
			}
		}
		t.Fatalf("no workload %s", name)
		return nil
	}
	other := labels.Set{"app.kubernetes.io/name": "intruder"} // any other pod of the namespace
	cases := []struct {
		from   labels.Set
		fromNS string
		to     string
		port   int32
		want   bool
	}{
		{pod("cluster-autoscaler"), namespace, "api-gateway", 8086, true},
		{pod("lifecycle"), namespace, "api-gateway", 8086, false},
		{other, namespace, "api-gateway", 8086, false},
		{other, "elsewhere", "api-gateway", 8086, false},
		{pod("lifecycle"), namespace, "nats", 4222, true},
		{pod("api-gateway"), namespace, "nats", 4222, true},
		{other, "elsewhere", "nats", 4222, false},
		{pod("nats"), namespace, "nats", 6222, true},
		{pod("lifecycle"), namespace, "nats", 6222, false},
		{other, "monitoring", "lifecycle", 8087, true},
	}
	for _, tc := range cases {
		ingress := allowsIngress(pols, pod(tc.to), tc.from, tc.fromNS, tc.port)
		egress := tc.fromNS != namespace || allowsEgressToPod(pols, tc.from, pod(tc.to), tc.port)
		if got := ingress && egress; got != tc.want {
			t.Errorf("%v (namespace %s) -> %s:%d allowed=%v (ingress %v, egress %v), want %v", tc.from, tc.fromNS, tc.to, tc.port, got, ingress, egress, tc.want)
		}
	}
	// Workers reach the outside world on exactly their ports.
	for _, tc := range []struct {
		from string
		port int32
		want bool
	}{
		{"cloud-adapter", 443, true}, {"cloud-adapter", 22, false},
		{"hook-runner", 22, true}, {"hook-runner", 443, false},
		{"lifecycle", 6443, true}, {"api-gateway", 443, false},
		{"node-agent", 443, true}, {"node-agent", 80, false}, {"node-agent", 22, false},
	} {
		if got := allowsEgressToWorld(pols, pod(tc.from), tc.port); got != tc.want {
			t.Errorf("%s -> outside:%d allowed=%v, want %v", tc.from, tc.port, got, tc.want)
		}
	}
	// The node agent reaches its VM's metadata service (Tencent,
	// Alibaba) over HTTP, and nobody else does.
	for _, ip := range []string{"169.254.0.23", "100.100.100.200"} {
		if !allowsEgressToIP(pols, pod("node-agent"), net.ParseIP(ip), 80) {
			t.Errorf("node-agent -> metadata %s:80 denied", ip)
		}
		if allowsEgressToIP(pols, pod("lifecycle"), net.ParseIP(ip), 80) {
			t.Errorf("lifecycle -> metadata %s:80 allowed", ip)
		}
	}
	if !allowsIngress(pols, pod("node-agent"), other, "monitoring", 8087) {
		t.Error("monitoring -> node-agent:8087 (metrics) denied")
	}
}

func checkMTLS(t *testing.T, s *manifests.Set) {
	insecure, tls := gatewayTLS(t, s)
	if insecure || !tls {
		t.Fatalf("gateway: insecure=%v tls=%v, want mTLS only", insecure, tls)
	}
	cc := caCloudConfig(t, s)
	if cc.Cert == "" || cc.Key == "" || cc.Cacert == "" {
		t.Fatalf("cloud-config lacks cert/key/cacert: %+v", cc)
	}
	host, _, _ := net.SplitHostPort(cc.Address)
	server := certificate(t, s, "api-gateway-grpc")
	if !slices.Contains(server.DNSNames, host) {
		t.Errorf("gateway certificate SANs %v do not include %q, CA's address host", server.DNSNames, host)
	}
	if !slices.Contains(server.Usages, "server auth") {
		t.Errorf("gateway certificate usages %v lack server auth", server.Usages)
	}
	client := certificate(t, s, "cluster-autoscaler-grpc-client")
	if !slices.Contains(client.Usages, "client auth") {
		t.Errorf("CA certificate usages %v lack client auth", client.Usages)
	}
	// The gateway admits CA's certificate by its SPIFFE id, and nothing
	// else the CA issues.
	gwd, gwc := workload(t, s, "Deployment", "api-gateway")
	allowed, ok := s.EnvValue(gwd, gwc, "NODESMITH_GRPC_ALLOWED_CLIENTS")
	if !ok {
		allowed = "spiffe://cluster.local/ns/nodesmith/sa/cluster-autoscaler" // the gateway's default
	}
	ids := strings.Split(allowed, ",")
	if len(client.URIs) == 0 || !slices.Contains(ids, client.URIs[0]) {
		t.Errorf("CA certificate URI SANs %v are not in the gateway's --grpc-allowed-clients %q", client.URIs, allowed)
	}
	if want := "spiffe://cluster.local/ns/" + caNamespace(t, s) + "/sa/" + caServiceAccount(t, s); !slices.Contains(client.URIs, want) {
		t.Errorf("CA certificate URI SANs %v lack its service account's SPIFFE id %s", client.URIs, want)
	}
	if slices.Contains(ids, client.CommonName) || slices.Contains(ids, "cluster-autoscaler") {
		t.Errorf("--grpc-allowed-clients %q admits a bare common name", allowed)
	}
	// REST over TLS, with a server certificate cert-manager renews.
	if insecure, tls := gatewayRESTTLS(t, s); insecure || !tls {
		t.Errorf("gateway REST: insecure=%v tls=%v, want TLS", insecure, tls)
	}
	restCert := certificate(t, s, "api-gateway-rest")
	if !slices.Contains(restCert.Usages, "server auth") || !slices.Contains(restCert.DNSNames, host) {
		t.Errorf("REST certificate usages %v / SANs %v lack server auth or %q", restCert.Usages, restCert.DNSNames, host)
	}
	for _, env := range []string{"NODESMITH_REST_TLS_CERT_FILE", "NODESMITH_REST_TLS_KEY_FILE"} {
		f, _ := s.EnvValue(gwd, gwc, env)
		if got := secretBehind(gwd, gwc, f); got != restCert.SecretName {
			t.Errorf("gateway %s=%s is in Secret %q, want %q", env, f, got, restCert.SecretName)
		}
	}
	if server.IssuerRef != client.IssuerRef {
		t.Errorf("server (%v) and client (%v) certificates come from different issuers: neither side could verify the other", server.IssuerRef, client.IssuerRef)
	}
	// The files each side reads are in the Secret cert-manager writes.
	w, c := workload(t, s, "Deployment", "cluster-autoscaler")
	for _, f := range []string{cc.Cert, cc.Key, cc.Cacert} {
		if got := secretBehind(w, c, f); got != client.SecretName {
			t.Errorf("CA reads %s from Secret %q, want %q", f, got, client.SecretName)
		}
	}
	gw, gc := workload(t, s, "Deployment", "api-gateway")
	for _, env := range []string{"NODESMITH_GRPC_CERT_FILE", "NODESMITH_GRPC_KEY_FILE", "NODESMITH_GRPC_CLIENT_CA_FILE"} {
		f, _ := s.EnvValue(gw, gc, env)
		if got := secretBehind(gw, gc, f); got != server.SecretName {
			t.Errorf("gateway %s=%s is in Secret %q, want %q", env, f, got, server.SecretName)
		}
	}
}

func checkServiceMonitor(t *testing.T, s *manifests.Set) {
	sm := find(s.Objects, "ServiceMonitor", "nodesmith")
	if sm == nil {
		t.Fatal("no ServiceMonitor")
	}
	var spec struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port string `json:"port"`
			Path string `json:"path"`
		} `json:"endpoints"`
	}
	raw, _, _ := unstructured.NestedMap(sm.Object, "spec")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &spec); err != nil {
		t.Fatal(err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Endpoints) != 1 || spec.Endpoints[0].Path != "/metrics" {
		t.Fatalf("endpoints %+v, want one /metrics endpoint", spec.Endpoints)
	}
	var selected []string
	for _, o := range s.OfKind("Service") {
		if !sel.Matches(labels.Set(o.GetLabels())) {
			continue
		}
		selected = append(selected, o.GetName())
		var svc corev1.Service
		mustInto(t, s, "Service", o.GetNamespace(), o.GetName(), &svc)
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
			return p.Name == spec.Endpoints[0].Port && p.Port == 8087
		}) {
			t.Errorf("Service %s has no port %q on 8087", svc.Name, spec.Endpoints[0].Port)
		}
	}
	slices.Sort(selected)
	want := slices.Sorted(slices.Values(services))
	if !slices.Equal(selected, want) {
		t.Errorf("ServiceMonitor selects %v, want %v", selected, want)
	}
}

func checkOTel(t *testing.T, s *manifests.Set) {
	for _, name := range services {
		w, c := workload(t, s, "Deployment", name)
		if v, ok := s.EnvValue(w, c, "OTEL_EXPORTER_OTLP_ENDPOINT"); !ok || v == "" {
			t.Errorf("%s: no OTEL_EXPORTER_OTLP_ENDPOINT", name)
		}
	}
	w, c := workload(t, s, "Deployment", "cluster-autoscaler")
	if _, ok := s.EnvValue(w, c, "OTEL_EXPORTER_OTLP_ENDPOINT"); ok {
		t.Error("the otel component patched Cluster Autoscaler, which does not export OTLP")
	}
}

// --- helpers ---

type cloudConfig struct {
	Address     string `json:"address"`
	Cert        string `json:"cert"`
	Key         string `json:"key"`
	Cacert      string `json:"cacert"`
	GRPCTimeout string `json:"grpc_timeout"`
}

// caCloudConfig reads the cloud-config file CA is started with, through
// its --cloud-config flag and volume.
func caCloudConfig(t *testing.T, s *manifests.Set) cloudConfig {
	t.Helper()
	w, c := workload(t, s, "Deployment", "cluster-autoscaler")
	var path string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--cloud-config="); ok {
			path = v
		}
	}
	if path == "" {
		t.Fatal("cluster-autoscaler has no --cloud-config")
	}
	m, rel := mountFor(c, path)
	if m == nil {
		t.Fatalf("cluster-autoscaler: %s is on no volume", path)
	}
	var cmName string
	for _, v := range w.Template.Spec.Volumes {
		if v.Name == m.Name && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	var cc cloudConfig
	if err := yaml.UnmarshalStrict([]byte(configMapData(t, s, cmName, rel)), &cc); err != nil {
		t.Fatalf("cloud-config: %v", err)
	}
	return cc
}

func mountFor(c corev1.Container, path string) (*corev1.VolumeMount, string) {
	for i, m := range c.VolumeMounts {
		if rel, ok := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/"); ok {
			return &c.VolumeMounts[i], rel
		}
	}
	return nil, ""
}

// secretBehind names the Secret whose volume holds path in container c.
func secretBehind(w manifests.Workload, c corev1.Container, path string) string {
	m, _ := mountFor(c, path)
	if m == nil {
		return ""
	}
	for _, v := range w.Template.Spec.Volumes {
		if v.Name == m.Name && v.Secret != nil {
			return v.Secret.SecretName
		}
	}
	return ""
}

// configMapData returns key of the ConfigMap generated as name (whatever
// its hash suffix).
func configMapData(t *testing.T, s *manifests.Set, name, key string) string {
	t.Helper()
	for _, o := range s.OfKind("ConfigMap") {
		if o.GetName() == name || strings.HasPrefix(o.GetName(), name+"-") && len(o.GetName()) == len(name)+11 {
			v, ok, _ := unstructured.NestedString(o.Object, "data", key)
			if !ok {
				t.Fatalf("ConfigMap %s has no key %s", o.GetName(), key)
			}
			return v
		}
	}
	t.Fatalf("no ConfigMap %s", name)
	return ""
}

func jsReplicas(t *testing.T, s *manifests.Set) string {
	return strings.TrimSpace(envFromCommon(t, s, "NODESMITH_JS_REPLICAS"))
}

func envFromCommon(t *testing.T, s *manifests.Set, name string) string {
	t.Helper()
	w, c := workload(t, s, "Deployment", "lifecycle")
	v, ok := s.EnvValue(w, c, name)
	if !ok {
		t.Fatalf("%s is not set", name)
	}
	return v
}

type certSpec struct {
	SecretName string   `json:"secretName"`
	CommonName string   `json:"commonName"`
	DNSNames   []string `json:"dnsNames"`
	URIs       []string `json:"uris"`
	Usages     []string `json:"usages"`
	IssuerRef  struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	} `json:"issuerRef"`
}

func certificate(t *testing.T, s *manifests.Set, name string) certSpec {
	t.Helper()
	o := s.Get("Certificate", namespace, name)
	if o == nil {
		t.Fatalf("no Certificate %s", name)
	}
	raw, _, _ := unstructured.NestedMap(o.Object, "spec")
	var c certSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// gatewayTLS reports the gateway's gRPC transport settings.
func gatewayTLS(t *testing.T, s *manifests.Set) (insecure, tls bool) {
	t.Helper()
	w, c := workload(t, s, "Deployment", "api-gateway")
	v, _ := s.EnvValue(w, c, "NODESMITH_GRPC_INSECURE")
	insecure = v == "true"
	tls = true
	for _, env := range []string{"NODESMITH_GRPC_CERT_FILE", "NODESMITH_GRPC_KEY_FILE", "NODESMITH_GRPC_CLIENT_CA_FILE"} {
		if v, _ := s.EnvValue(w, c, env); v == "" {
			tls = false
		}
	}
	return insecure, tls
}

// gatewayRESTTLS reports the gateway's REST transport settings.
func gatewayRESTTLS(t *testing.T, s *manifests.Set) (insecure, tls bool) {
	t.Helper()
	w, c := workload(t, s, "Deployment", "api-gateway")
	v, _ := s.EnvValue(w, c, "NODESMITH_REST_INSECURE")
	insecure = v == "true"
	tls = true
	for _, env := range []string{"NODESMITH_REST_TLS_CERT_FILE", "NODESMITH_REST_TLS_KEY_FILE"} {
		if v, _ := s.EnvValue(w, c, env); v == "" {
			tls = false
		}
	}
	return insecure, tls
}

// caNamespace and caServiceAccount are where Cluster Autoscaler runs and
// as whom.
func caNamespace(t *testing.T, s *manifests.Set) string {
	t.Helper()
	w, _ := workload(t, s, "Deployment", "cluster-autoscaler")
	return w.Object.GetNamespace()
}

func caServiceAccount(t *testing.T, s *manifests.Set) string {
	t.Helper()
	w, _ := workload(t, s, "Deployment", "cluster-autoscaler")
	return w.Template.Spec.ServiceAccountName
}

func workloads(t *testing.T, s *manifests.Set) []manifests.Workload {
	t.Helper()
	ws, err := s.Workloads()
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

func workload(t *testing.T, s *manifests.Set, kind, name string) (manifests.Workload, corev1.Container) {
	t.Helper()
	for _, w := range workloads(t, s) {
		if w.Object.GetKind() == kind && w.Object.GetName() == name {
			for _, c := range w.Template.Spec.Containers {
				if c.Name == name {
					return w, c
				}
			}
			t.Fatalf("%s has no container %s", w.Name(), name)
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return manifests.Workload{}, corev1.Container{}
}

func mustInto(t *testing.T, s *manifests.Set, kind, ns, name string, out any) {
	t.Helper()
	found, err := s.Into(kind, ns, name, out)
	if err != nil || !found {
		t.Fatalf("%s %s/%s: found=%v err=%v", kind, ns, name, found, err)
	}
}

func replicas(o *unstructured.Unstructured) int64 {
	r, found, _ := unstructured.NestedInt64(o.Object, "spec", "replicas")
	if !found {
		return 1 // the API default
	}
	return r
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// container edits the container named like the workload in place.
func container(objs []*unstructured.Unstructured, kind, name string, edit func(map[string]any)) {
	o := find(objs, kind, name)
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	for _, c := range cs {
		if m := c.(map[string]any); m["name"] == name {
			edit(m)
		}
	}
	_ = unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers")
}

// kustomizeDir is deploy/kustomize of this repository.
func kustomizeDir(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		k := filepath.Join(d, "deploy", "kustomize")
		if _, err := os.Stat(filepath.Join(k, "base", "kustomization.yaml")); err == nil {
			return k
		}
		if filepath.Dir(d) == d {
			t.Fatalf("deploy/kustomize not found above %s", wd)
		}
	}
}
