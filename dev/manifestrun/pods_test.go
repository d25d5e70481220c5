package manifestrun

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// rendering indexes the objects of one kustomize rendering.
type rendering struct {
	objects    []*unstructured.Unstructured
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
	services   []*corev1.Service
	namespace  string
}

func index(t *testing.T, objs []*unstructured.Unstructured) *rendering {
	t.Helper()
	r := &rendering{objects: objs, configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for _, o := range objs {
		switch o.GetKind() {
		case "ConfigMap":
			cm := &corev1.ConfigMap{}
			convert(t, o, cm)
			r.configMaps[cm.Name] = cm
		case "Secret":
			s := &corev1.Secret{}
			convert(t, o, s)
			for k, v := range s.StringData {
				if s.Data == nil {
					s.Data = map[string][]byte{}
				}
				s.Data[k] = []byte(v)
			}
			r.secrets[s.Name] = s
		case "Service":
			s := &corev1.Service{}
			convert(t, o, s)
			r.services = append(r.services, s)
		case "Namespace":
			r.namespace = o.GetName()
		}
	}
	if r.namespace == "" {
		t.Fatal("the rendering has no Namespace")
	}
	return r
}

// secretNamed finds a Secret by the name it was generated with: kustomize
// appends a content hash ("-" and 10 characters) to generated names.
func (r *rendering) secretNamed(name string) (*corev1.Secret, bool) {
	if s, ok := r.secrets[name]; ok {
		return s, true
	}
	var found *corev1.Secret
	for n, s := range r.secrets {
		if h, ok := strings.CutPrefix(n, name+"-"); ok && len(h) == 10 && !strings.Contains(h, "-") {
			if found != nil {
				return nil, false
			}
			found = s
		}
	}
	return found, found != nil
}

func convert(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

func (r *rendering) ofKind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range r.objects {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// pod is one replica of a Deployment or StatefulSet, as the kubelet would
// run it: its own root directory standing for its filesystem, its own
// loopback ports standing for its network namespace.
type pod struct {
	name      string
	namespace string
	workload  string
	labels    map[string]string
	spec      corev1.PodSpec
	// root prefixes every path inside the pod's volume mounts.
	root string
	// ports maps each containerPort of the pod to its loopback port.
	ports map[int32]int
	// pvcs are the StatefulSet's volumeClaimTemplates (empty dirs here).
	pvcs []string
}

// pods makes the pods of every Deployment and StatefulSet: as many as
// the rendering asks for (spec.replicas, else the minReplicas of the
// HorizontalPodAutoscaler owning the Deployment, else 1), named as their
// controllers would (StatefulSet: <name>-<ordinal>).
func (r *rendering) pods(t *testing.T, dir string, ports *portAllocator) []*pod {
	t.Helper()
	hpaMin := map[string]int32{}
	for _, o := range r.ofKind("HorizontalPodAutoscaler") {
		h := &autoscalingv2.HorizontalPodAutoscaler{}
		convert(t, o, h)
		if h.Spec.MinReplicas != nil {
			hpaMin[h.Spec.ScaleTargetRef.Kind+"/"+h.Spec.ScaleTargetRef.Name] = *h.Spec.MinReplicas
		}
	}
	var out []*pod
	add := func(kind, name string, replicas *int32, tmpl corev1.PodTemplateSpec, podName func(i int) string, pvcs []string) {
		n := int32(1)
		if m, ok := hpaMin[kind+"/"+name]; ok {
			n = m
		}
		if replicas != nil {
			n = *replicas
		}
		for i := range int(n) {
			p := &pod{
				name: podName(i), namespace: r.namespace, workload: name,
				labels: tmpl.Labels, spec: *tmpl.Spec.DeepCopy(), ports: map[int32]int{}, pvcs: pvcs,
			}
			p.root = filepath.Join(dir, p.name)
			for _, c := range p.spec.Containers {
				for _, cp := range c.Ports {
					p.ports[cp.ContainerPort] = ports.next(t)
				}
			}
			out = append(out, p)
		}
	}
	for _, o := range r.ofKind("StatefulSet") {
		s := &appsv1.StatefulSet{}
		convert(t, o, s)
		var pvcs []string
		for _, c := range s.Spec.VolumeClaimTemplates {
			pvcs = append(pvcs, c.Name)
		}
		add("StatefulSet", s.Name, s.Spec.Replicas, s.Spec.Template, func(i int) string { return fmt.Sprintf("%s-%d", s.Name, i) }, pvcs)
	}
	for _, o := range r.ofKind("Deployment") {
		d := &appsv1.Deployment{}
		convert(t, o, d)
		add("Deployment", d.Name, d.Spec.Replicas, d.Spec.Template, func(i int) string { return fmt.Sprintf("%s-manifestrun-%d", d.Name, i) }, nil)
	}
	return out
}

// portAllocator hands out free loopback ports from 10000-19999. Not from
// the kernel (port 0): the kernel picks from the ephemeral range
// (32768-60999), the same range the outgoing connections of everything
// else on the machine (kube-apiserver to etcd, the services to NATS, ...)
// take their source ports from, so a port chosen there, closed and handed
// to a process started later can meanwhile be taken by such a connection.
// Below the ephemeral range, only a listener can take a port.
type portAllocator struct {
	used  map[int]bool
	next0 int
}

func newPortAllocator() *portAllocator {
	return &portAllocator{used: map[int]bool{}, next0: 10000 + rand.IntN(9000)}
}

func (a *portAllocator) next(t *testing.T) int {
	t.Helper()
	for range 10000 {
		p := a.next0
		a.next0++
		if a.next0 > 19999 {
			a.next0 = 10000
		}
		if a.used[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		l.Close()
		a.used[p] = true
		return p
	}
	t.Fatal("no free port in 10000-19999")
	return 0
}

// endpoint is one port of one pod, on loopback.
type endpoint struct {
	pod  *pod
	port int
}

// addresses maps the DNS names pods reach each other by to loopback:
// "<service>[.<namespace>[.svc[.cluster.local]]]:<service port>" to the
// pods the Service selects (all of them, as kube-proxy would balance),
// and "<pod>.<headless service>[...]:<port>" to that one pod.
type addresses map[string][]endpoint

func (r *rendering) addresses(t *testing.T, pods []*pod) addresses {
	t.Helper()
	a := addresses{}
	names := func(first string) []string {
		return []string{first, first + "." + r.namespace, first + "." + r.namespace + ".svc", first + "." + r.namespace + ".svc.cluster.local"}
	}
	for _, s := range r.services {
		for _, sp := range s.Spec.Ports {
			for _, p := range pods {
				if len(s.Spec.Selector) == 0 || !selects(s.Spec.Selector, p.labels) {
					continue
				}
				cp, ok := p.targetPort(sp.TargetPort, sp.Port)
				if !ok {
					t.Fatalf("Service %s port %s: pod %s has no container port %s", s.Name, sp.Name, p.name, sp.TargetPort.String())
				}
				ep := endpoint{pod: p, port: p.ports[cp]}
				for _, n := range names(s.Name) {
					k := n + ":" + strconv.Itoa(int(sp.Port))
					a[k] = append(a[k], ep)
				}
				if s.Spec.ClusterIP == corev1.ClusterIPNone {
					for _, n := range names(p.name + "." + s.Name) {
						a[n+":"+strconv.Itoa(int(sp.Port))] = []endpoint{ep}
					}
				}
			}
		}
	}
	return a
}

func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// targetPort resolves a Service's or probe's port (a number or the name of
// a container port) to the container port.
func (p *pod) targetPort(tp intstr.IntOrString, dflt int32) (int32, bool) {
	if tp.Type == intstr.String {
		for _, c := range p.spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == tp.StrVal {
					return cp.ContainerPort, true
				}
			}
		}
		return 0, false
	}
	n := tp.IntVal
	if n == 0 {
		n = dflt
	}
	_, ok := p.ports[n]
	return n, ok
}

// The one transformation between the manifests and this machine, applied
// to every container argument, every environment value and the content of
// every mounted ConfigMap file (never to Secrets), in rewrite below:
//
//  1. Paths: a path inside one of the container's volume mounts
//     (/etc/nats/nats.conf, /data, ...) gets the pod's root directory as
//     prefix. Every mount is materialised there.
//  2. Listen addresses: ":<port>" and "0.0.0.0:<port>" naming one of the
//     pod's containerPorts become "127.0.0.1:<its loopback port>" (pods
//     share this machine's network, so each pod's ports are remapped).
//  3. DNS names: "[scheme://]<service or pod DNS name>:<service port>"
//     becomes the loopback address of the endpoint pod(s), joined with ","
//     when a Service selects several pods and the value is a URL (NATS
//     clients take a list; kube-proxy would pick one of them).
//
// Nothing else in the manifests changes, except the overrides listed in
// overrides (manifestrun_test.go).
var (
	bindRE = regexp.MustCompile(`(^|[\s"'=,\[])(?:0\.0\.0\.0)?:(\d+)\b`)
	dnsRE  = regexp.MustCompile(`(^|[\s"'=,\[])((?:[a-z][a-z0-9+.-]*://)?)([a-z0-9][a-z0-9.-]*):(\d+)\b`)
)

func (p *pod) rewrite(c *corev1.Container, addrs addresses, s string) string {
	// 1. Paths into mounts, longest mount first.
	mounts := slices.Clone(c.VolumeMounts)
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].MountPath) > len(mounts[j].MountPath) })
	for _, m := range mounts {
		re := regexp.MustCompile(`(^|[\s"'=,:\[])` + regexp.QuoteMeta(strings.TrimSuffix(m.MountPath, "/")) + `(/|$|[\s"',\]])`)
		s = re.ReplaceAllStringFunc(s, func(match string) string {
			i := strings.Index(match, m.MountPath)
			if strings.HasPrefix(match[i:], p.root) {
				return match
			}
			return match[:i] + p.root + match[i:]
		})
	}
	// 2. Listen addresses of the pod's ports.
	s = bindRE.ReplaceAllStringFunc(s, func(match string) string {
		sub := bindRE.FindStringSubmatch(match)
		n, _ := strconv.Atoi(sub[2])
		lp, ok := p.ports[int32(n)]
		if !ok {
			return match
		}
		return sub[1] + "127.0.0.1:" + strconv.Itoa(lp)
	})
	// 3. DNS names of Services and pods.
	s = dnsRE.ReplaceAllStringFunc(s, func(match string) string {
		sub := dnsRE.FindStringSubmatch(match)
		eps, ok := addrs[sub[3]+":"+sub[4]]
		if !ok {
			return match
		}
		if sub[2] == "" {
			eps = eps[:1]
		}
		var parts []string
		for _, ep := range eps {
			parts = append(parts, sub[2]+"127.0.0.1:"+strconv.Itoa(ep.port))
		}
		return sub[1] + strings.Join(parts, ",")
	})
	return s
}

// env resolves a container's environment as the kubelet does: envFrom
// first, then env (later wins), $(VAR) references to earlier variables
// expanded, valueFrom from the rendered objects and the pod, and HOSTNAME
// (the pod's name, set by the runtime). It fails the test on a reference
// to something the rendering does not hold (the kubelet would not start
// the container).
func (p *pod) env(t *testing.T, r *rendering, c *corev1.Container) []corev1.EnvVar {
	t.Helper()
	vars := map[string]string{"HOSTNAME": p.name}
	order := []string{"HOSTNAME"}
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			cm, ok := r.configMaps[ef.ConfigMapRef.Name]
			if !ok {
				t.Fatalf("pod %s: envFrom ConfigMap %s is not in the rendering", p.name, ef.ConfigMapRef.Name)
			}
			for _, k := range sortedKeys(cm.Data) {
				set(ef.Prefix+k, cm.Data[k])
			}
		case ef.SecretRef != nil:
			s, ok := r.secrets[ef.SecretRef.Name]
			if !ok {
				t.Fatalf("pod %s: envFrom Secret %s is not in the rendering", p.name, ef.SecretRef.Name)
			}
			for _, k := range sortedKeys(s.Data) {
				set(ef.Prefix+k, string(s.Data[k]))
			}
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, expand(e.Value, vars))
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				set(e.Name, p.name)
			case "metadata.namespace":
				set(e.Name, p.namespace)
			case "spec.serviceAccountName":
				set(e.Name, p.spec.ServiceAccountName)
			case "status.podIP", "status.hostIP":
				set(e.Name, "127.0.0.1")
			case "spec.nodeName":
				set(e.Name, "manifestrun-node")
			default:
				t.Fatalf("pod %s: env %s: fieldRef %s not supported by this test", p.name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, ok := r.secrets[ref.Name]
			v, ok2 := []byte(nil), false
			if ok {
				v, ok2 = s.Data[ref.Key]
			}
			if !ok2 {
				if ref.Optional != nil && *ref.Optional {
					continue
				}
				t.Fatalf("pod %s: env %s: Secret %s key %s is not in the rendering", p.name, e.Name, ref.Name, ref.Key)
			}
			set(e.Name, string(v))
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, ok := r.configMaps[ref.Name]
			v, ok2 := "", false
			if ok {
				v, ok2 = cm.Data[ref.Key]
			}
			if !ok2 {
				if ref.Optional != nil && *ref.Optional {
					continue
				}
				t.Fatalf("pod %s: env %s: ConfigMap %s key %s is not in the rendering", p.name, e.Name, ref.Name, ref.Key)
			}
			set(e.Name, v)
		case e.ValueFrom.ResourceFieldRef != nil:
			ref := e.ValueFrom.ResourceFieldRef
			q, ok := c.Resources.Limits[corev1.ResourceName(strings.TrimPrefix(ref.Resource, "limits."))]
			if strings.HasPrefix(ref.Resource, "requests.") {
				q, ok = c.Resources.Requests[corev1.ResourceName(strings.TrimPrefix(ref.Resource, "requests."))]
			}
			if !ok {
				t.Fatalf("pod %s: env %s: resource %s not set", p.name, e.Name, ref.Resource)
			}
			set(e.Name, strconv.FormatInt(q.Value(), 10))
		default:
			t.Fatalf("pod %s: env %s: valueFrom not supported by this test", p.name, e.Name)
		}
	}
	out := make([]corev1.EnvVar, 0, len(order))
	for _, k := range order {
		out = append(out, corev1.EnvVar{Name: k, Value: vars[k]})
	}
	return out
}

var refRE = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// expand expands $(VAR) as Kubernetes does in env values, command and
// args: defined variables only, $$ escapes.
func expand(s string, vars map[string]string) string {
	return refRE.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := vars[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// materialize writes the volumes of container c under the pod's root at
// their mount paths: ConfigMap files (rewritten, see rewrite), Secret
// files as rendered, projected sources, emptyDirs and the StatefulSet's
// claims as empty directories. A volume or a key the rendering does not
// hold fails the test, as it would keep the pod from starting.
func (p *pod) materialize(t *testing.T, r *rendering, c *corev1.Container, addrs addresses) {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range p.spec.Volumes {
		vols[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		dir := filepath.Join(p.root, m.MountPath)
		files := map[string][]byte{}
		v, ok := vols[m.Name]
		switch {
		case !ok && slices.Contains(p.pvcs, m.Name):
			// A PersistentVolumeClaim of the StatefulSet: an empty directory.
		case !ok:
			t.Fatalf("pod %s container %s: volume %s is not defined", p.name, c.Name, m.Name)
		case v.ConfigMap != nil:
			p.configMapFiles(t, r, c, addrs, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional, files)
		case v.Secret != nil:
			p.secretFiles(t, r, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional, files)
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				switch {
				case src.Secret != nil:
					p.secretFiles(t, r, src.Secret.Name, src.Secret.Items, src.Secret.Optional, files)
				case src.ConfigMap != nil:
					p.configMapFiles(t, r, c, addrs, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, files)
				default:
					t.Fatalf("pod %s volume %s: projected source not supported by this test", p.name, m.Name)
				}
			}
		case v.EmptyDir != nil:
		default:
			t.Fatalf("pod %s volume %s: volume type not supported by this test", p.name, m.Name)
		}
		if m.SubPath != "" {
			b, ok := files[m.SubPath]
			if !ok {
				t.Fatalf("pod %s container %s: subPath %s of volume %s does not exist", p.name, c.Name, m.SubPath, m.Name)
			}
			writeFile(t, dir, b)
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range files {
			writeFile(t, filepath.Join(dir, name), b)
		}
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	// 0600: the process runs as this user (the manifests' 0440 with
	// fsGroup would not let the owner write either).
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (p *pod) configMapFiles(t *testing.T, r *rendering, c *corev1.Container, addrs addresses, name string, items []corev1.KeyToPath, optional *bool, into map[string][]byte) {
	t.Helper()
	cm, ok := r.configMaps[name]
	if !ok {
		if optional != nil && *optional {
			return
		}
		t.Fatalf("pod %s: ConfigMap %s is not in the rendering", p.name, name)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(p.rewrite(c, addrs, v))
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	pick(t, p.name, "ConfigMap "+name, data, items, into)
}

func (p *pod) secretFiles(t *testing.T, r *rendering, name string, items []corev1.KeyToPath, optional *bool, into map[string][]byte) {
	t.Helper()
	s, ok := r.secrets[name]
	if !ok {
		if optional != nil && *optional {
			return
		}
		t.Fatalf("pod %s: Secret %s is not in the rendering", p.name, name)
	}
	pick(t, p.name, "Secret "+name, s.Data, items, into)
}

func pick(t *testing.T, pod, what string, data map[string][]byte, items []corev1.KeyToPath, into map[string][]byte) {
	t.Helper()
	if len(items) == 0 {
		for k, v := range data {
			into[k] = v
		}
		return
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			t.Fatalf("pod %s: %s has no key %s", pod, what, it.Key)
		}
		into[it.Path] = v
	}
}

// loopback reports whether the rewrite maps dnsName (or, for a wildcard
// "*.<rest>", some name under it) to loopback.
func (a addresses) loopback(dnsName string) bool {
	for hp := range a {
		host, _, _ := strings.Cut(hp, ":")
		if host == dnsName {
			return true
		}
		if rest, ok := strings.CutPrefix(dnsName, "*."); ok {
			if _, after, ok := strings.Cut(host, "."); ok && after == rest {
				return true
			}
		}
	}
	return false
}
