package manifests

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// ShutdownGraceEnv is the variable every nodesmith service reads its
// --shutdown-grace from; the pod's terminationGracePeriodSeconds must
// cover it (plus any preStop sleep), or Kubernetes kills in-flight work.
const ShutdownGraceEnv = "NODESMITH_SHUTDOWN_GRACE"

// Set is a rendering, indexed for lookups.
type Set struct {
	// Objects in rendering order.
	Objects []*unstructured.Unstructured
	byKey   map[string]*unstructured.Unstructured
}

// NewSet indexes objs.
func NewSet(objs []*unstructured.Unstructured) *Set {
	s := &Set{Objects: objs, byKey: map[string]*unstructured.Unstructured{}}
	for _, o := range objs {
		s.byKey[key(o.GetKind(), o.GetNamespace(), o.GetName())] = o
	}
	return s
}

func key(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

// Get returns the object of kind in namespace ns (empty for cluster
// scoped kinds) named name, or nil.
func (s *Set) Get(kind, ns, name string) *unstructured.Unstructured {
	return s.byKey[key(kind, ns, name)]
}

// Into converts the object of kind/ns/name into out (a typed API object),
// reporting whether it exists.
func (s *Set) Into(kind, ns, name string, out any) (bool, error) {
	o := s.Get(kind, ns, name)
	if o == nil {
		return false, nil
	}
	return true, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out)
}

// OfKind returns the objects of kind.
func (s *Set) OfKind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range s.Objects {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// OfApp returns the objects of one app: those labelled
// app.kubernetes.io/name=name (a service's Deployment, ServiceAccount,
// RBAC, ...).
func (s *Set) OfApp(name string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range s.Objects {
		if o.GetLabels()["app.kubernetes.io/name"] == name {
			out = append(out, o)
		}
	}
	return out
}

// Workload is an object with a pod template.
type Workload struct {
	Object   *unstructured.Unstructured
	Template corev1.PodTemplateSpec
	// ClaimTemplates are a StatefulSet's volumeClaimTemplates names, which
	// containers mount like volumes.
	ClaimTemplates []string
}

// Name is "Kind namespace/name".
func (w Workload) Name() string {
	return fmt.Sprintf("%s %s/%s", w.Object.GetKind(), w.Object.GetNamespace(), w.Object.GetName())
}

// Workloads returns the Deployments, DaemonSets and StatefulSets with
// their pod templates.
func (s *Set) Workloads() ([]Workload, error) {
	var out []Workload
	for _, o := range s.Objects {
		var (
			tmpl   corev1.PodTemplateSpec
			claims []string
		)
		switch o.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				return nil, fmt.Errorf("decoding Deployment %s: %w", o.GetName(), err)
			}
			tmpl = d.Spec.Template
		case "DaemonSet":
			var ds appsv1.DaemonSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
				return nil, fmt.Errorf("decoding DaemonSet %s: %w", o.GetName(), err)
			}
			tmpl = ds.Spec.Template
		case "StatefulSet":
			var st appsv1.StatefulSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &st); err != nil {
				return nil, fmt.Errorf("decoding StatefulSet %s: %w", o.GetName(), err)
			}
			tmpl = st.Spec.Template
			for _, pvc := range st.Spec.VolumeClaimTemplates {
				claims = append(claims, pvc.Name)
			}
		default:
			continue
		}
		out = append(out, Workload{Object: o, Template: tmpl, ClaimTemplates: claims})
	}
	return out, nil
}

// EnvValue returns the value of variable name in container c of w: set
// directly, or through envFrom from a ConfigMap of the set. ok is false
// when the variable is not set (or comes from elsewhere).
func (s *Set) EnvValue(w Workload, c corev1.Container, name string) (value string, ok bool) {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom == nil {
			value, ok = e.Value, true
		}
	}
	if ok {
		return value, true
	}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil {
			continue
		}
		var cm corev1.ConfigMap
		if found, err := s.Into("ConfigMap", w.Object.GetNamespace(), from.ConfigMapRef.Name, &cm); err == nil && found {
			if v, has := cm.Data[strings.TrimPrefix(name, from.Prefix)]; has && strings.HasPrefix(name, from.Prefix) {
				value, ok = v, true
			}
		}
	}
	return value, ok
}

// Check returns every violation of the rules in the package comment.
func Check(objs []*unstructured.Unstructured) []error {
	s := NewSet(objs)
	var errs []error
	ws, err := s.Workloads()
	if err != nil {
		return []error{err}
	}
	for _, w := range ws {
		errs = append(errs, checkPod(s, w)...)
	}
	errs = append(errs, checkRBAC(s)...)
	errs = append(errs, checkServices(s, ws)...)
	errs = append(errs, checkScaling(s, ws)...)
	return errs
}

func checkPod(s *Set, w Workload) []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", w.Name(), fmt.Sprintf(format, args...)))
	}
	ns := w.Object.GetNamespace()
	spec := w.Template.Spec
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	podNonRoot := psc.RunAsNonRoot != nil && *psc.RunAsNonRoot
	podSeccomp := psc.SeccompProfile != nil && psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault

	// The ServiceAccount exists; a pod whose account has no role binding
	// has no use for an API token, so it must not get one.
	sa := spec.ServiceAccountName
	if sa == "" {
		fail("no serviceAccountName (the namespace's default account is shared)")
	} else if s.Get("ServiceAccount", ns, sa) == nil {
		fail("ServiceAccount %q is not in the rendering", sa)
	}
	if sa != "" && !s.bound(ns, sa) && (spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken) {
		fail("ServiceAccount %q has no role bindings: set automountServiceAccountToken: false", sa)
	}

	// Every volume source refers to something that will exist.
	volumes := map[string]corev1.Volume{}
	for _, name := range w.ClaimTemplates {
		volumes[name] = corev1.Volume{Name: name}
	}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
		switch {
		case v.ConfigMap != nil:
			errs = append(errs, s.configMapRef(w, v.ConfigMap.Name, v.ConfigMap.Optional, keysOf(v.ConfigMap.Items))...)
		case v.Secret != nil:
			errs = append(errs, s.secretRef(w, v.Secret.SecretName, v.Secret.Optional, keysOf(v.Secret.Items))...)
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				if src.ConfigMap != nil {
					errs = append(errs, s.configMapRef(w, src.ConfigMap.Name, src.ConfigMap.Optional, keysOf(src.ConfigMap.Items))...)
				}
				if src.Secret != nil {
					errs = append(errs, s.secretRef(w, src.Secret.Name, src.Secret.Optional, keysOf(src.Secret.Items))...)
				}
			}
		}
	}

	containers := slices.Concat(spec.InitContainers, spec.Containers)
	for _, c := range containers {
		cfail := func(format string, args ...any) { fail("container %s: %s", c.Name, fmt.Sprintf(format, args...)) }
		if c.Image == "" || strings.HasSuffix(c.Image, ":latest") || !strings.ContainsAny(lastPathElem(c.Image), ":@") {
			cfail("image %q must be pinned to a tag or digest (not latest)", c.Image)
		}
		if c.LivenessProbe == nil {
			cfail("no liveness probe")
		}
		if c.ReadinessProbe == nil {
			cfail("no readiness probe")
		}
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if _, ok := c.Resources.Requests[res]; !ok {
				cfail("no %s request", res)
			}
			if _, ok := c.Resources.Limits[res]; !ok {
				cfail("no %s limit", res)
			}
		}
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		if !podNonRoot && (sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot) {
			cfail("runAsNonRoot is not set")
		}
		if (psc.RunAsUser != nil && *psc.RunAsUser == 0) || (sc.RunAsUser != nil && *sc.RunAsUser == 0) {
			cfail("runs as uid 0")
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			cfail("readOnlyRootFilesystem is not true")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			cfail("allowPrivilegeEscalation is not false")
		}
		if sc.Privileged != nil && *sc.Privileged {
			cfail("privileged")
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			cfail("capabilities do not drop ALL")
		} else if len(sc.Capabilities.Add) > 0 {
			cfail("adds capabilities %v", sc.Capabilities.Add)
		}
		if !podSeccomp && (sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault) {
			cfail("seccomp profile is not RuntimeDefault")
		}
		for _, m := range c.VolumeMounts {
			if _, ok := volumes[m.Name]; !ok {
				cfail("mounts volume %q that the pod does not define", m.Name)
			}
		}
		for _, from := range c.EnvFrom {
			if from.ConfigMapRef != nil {
				errs = append(errs, s.configMapRef(w, from.ConfigMapRef.Name, from.ConfigMapRef.Optional, nil)...)
			}
			if from.SecretRef != nil {
				errs = append(errs, s.secretRef(w, from.SecretRef.Name, from.SecretRef.Optional, nil)...)
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				errs = append(errs, s.configMapRef(w, r.Name, r.Optional, []string{r.Key})...)
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				errs = append(errs, s.secretRef(w, r.Name, r.Optional, []string{r.Key})...)
			}
		}
		// Kubernetes must not kill a service before its own graceful
		// shutdown (after any preStop sleep) can finish.
		if v, ok := s.EnvValue(w, c, ShutdownGraceEnv); ok {
			grace, err := time.ParseDuration(v)
			if err != nil {
				cfail("%s=%q: %v", ShutdownGraceEnv, v, err)
				continue
			}
			var sleep time.Duration
			if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
				sleep = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
			}
			period := 30 * time.Second // the Kubernetes default
			if spec.TerminationGracePeriodSeconds != nil {
				period = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
			}
			if period <= sleep+grace {
				cfail("terminationGracePeriodSeconds (%s) must exceed the preStop sleep (%s) plus %s (%s)", period, sleep, ShutdownGraceEnv, grace)
			}
		}
	}
	return errs
}

// bound reports whether a RoleBinding or ClusterRoleBinding of the set
// names the ServiceAccount ns/name.
func (s *Set) bound(ns, name string) bool {
	for _, kind := range []string{"RoleBinding", "ClusterRoleBinding"} {
		for _, o := range s.OfKind(kind) {
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			for _, raw := range subjects {
				sub, _ := raw.(map[string]any)
				if sub["kind"] == rbacv1.ServiceAccountKind && sub["name"] == name && sub["namespace"] == ns {
					return true
				}
			}
		}
	}
	return false
}

func (s *Set) configMapRef(w Workload, name string, optional *bool, keys []string) []error {
	if optional != nil && *optional {
		return nil
	}
	var cm corev1.ConfigMap
	found, err := s.Into("ConfigMap", w.Object.GetNamespace(), name, &cm)
	if err != nil {
		return []error{fmt.Errorf("%s: ConfigMap %q: %w", w.Name(), name, err)}
	}
	if !found {
		return []error{fmt.Errorf("%s: ConfigMap %q is not in the rendering", w.Name(), name)}
	}
	var errs []error
	for _, k := range keys {
		_, inData := cm.Data[k]
		_, inBinary := cm.BinaryData[k]
		if !inData && !inBinary {
			errs = append(errs, fmt.Errorf("%s: ConfigMap %q has no key %q", w.Name(), name, k))
		}
	}
	return errs
}

// secretRef checks a Secret reference: the Secret is rendered, or a
// cert-manager Certificate of the set writes it (its keys are then
// tls.crt, tls.key and ca.crt).
func (s *Set) secretRef(w Workload, name string, optional *bool, keys []string) []error {
	if optional != nil && *optional {
		return nil
	}
	ns := w.Object.GetNamespace()
	have := map[string]bool{}
	if o := s.Get("Secret", ns, name); o != nil {
		var sec corev1.Secret
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &sec); err != nil {
			return []error{fmt.Errorf("%s: Secret %q: %w", w.Name(), name, err)}
		}
		for k := range sec.Data {
			have[k] = true
		}
		for k := range sec.StringData {
			have[k] = true
		}
	} else if s.certificateSecret(ns, name) {
		have = map[string]bool{"tls.crt": true, "tls.key": true, "ca.crt": true}
	} else {
		return []error{fmt.Errorf("%s: Secret %q is neither rendered nor written by a cert-manager Certificate", w.Name(), name)}
	}
	var errs []error
	for _, k := range keys {
		if !have[k] {
			errs = append(errs, fmt.Errorf("%s: Secret %q has no key %q", w.Name(), name, k))
		}
	}
	return errs
}

func (s *Set) certificateSecret(ns, name string) bool {
	for _, o := range s.OfKind("Certificate") {
		if o.GetNamespace() != ns || !strings.HasPrefix(o.GetAPIVersion(), "cert-manager.io/") {
			continue
		}
		if sn, _, _ := unstructured.NestedString(o.Object, "spec", "secretName"); sn == name {
			return true
		}
	}
	return false
}

// checkRBAC: no wildcard anywhere in a rule, and every binding refers to
// a role and service accounts that exist.
func checkRBAC(s *Set) []error {
	var errs []error
	for _, kind := range []string{"Role", "ClusterRole"} {
		for _, o := range s.OfKind(kind) {
			var r rbacv1.ClusterRole // Role and ClusterRole share the rules shape.
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
				errs = append(errs, fmt.Errorf("%s %s: %w", kind, o.GetName(), err))
				continue
			}
			if r.AggregationRule != nil {
				errs = append(errs, fmt.Errorf("%s %s: aggregated roles grow with whatever else is installed", kind, o.GetName()))
			}
			for i, rule := range r.Rules {
				for field, values := range map[string][]string{
					"apiGroups": rule.APIGroups, "resources": rule.Resources, "verbs": rule.Verbs,
					"resourceNames": rule.ResourceNames, "nonResourceURLs": rule.NonResourceURLs,
				} {
					for _, v := range values {
						if strings.Contains(v, "*") {
							errs = append(errs, fmt.Errorf("%s %s: rule %d: wildcard %q in %s", kind, o.GetName(), i, v, field))
						}
					}
				}
				if len(rule.Verbs) == 0 {
					errs = append(errs, fmt.Errorf("%s %s: rule %d has no verbs", kind, o.GetName(), i))
				}
			}
		}
	}
	for _, kind := range []string{"RoleBinding", "ClusterRoleBinding"} {
		for _, o := range s.OfKind(kind) {
			var b rbacv1.RoleBinding // the same shape as ClusterRoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
				errs = append(errs, fmt.Errorf("%s %s: %w", kind, o.GetName(), err))
				continue
			}
			roleNS := ""
			if b.RoleRef.Kind == "Role" {
				roleNS = o.GetNamespace()
			}
			if s.Get(b.RoleRef.Kind, roleNS, b.RoleRef.Name) == nil {
				errs = append(errs, fmt.Errorf("%s %s: %s %q is not in the rendering", kind, o.GetName(), b.RoleRef.Kind, b.RoleRef.Name))
			}
			for _, sub := range b.Subjects {
				if sub.Kind != rbacv1.ServiceAccountKind {
					errs = append(errs, fmt.Errorf("%s %s: binds %s %q; only ServiceAccounts are expected", kind, o.GetName(), sub.Kind, sub.Name))
					continue
				}
				if s.Get("ServiceAccount", sub.Namespace, sub.Name) == nil {
					errs = append(errs, fmt.Errorf("%s %s: ServiceAccount %s/%s is not in the rendering", kind, o.GetName(), sub.Namespace, sub.Name))
				}
			}
		}
	}
	return errs
}

// checkServices: every Service selects a workload and its target ports
// name ports that the selected containers declare.
func checkServices(s *Set, ws []Workload) []error {
	var errs []error
	for _, o := range s.OfKind("Service") {
		var svc corev1.Service
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &svc); err != nil {
			errs = append(errs, fmt.Errorf("decoding Service %s: %w", o.GetName(), err))
			continue
		}
		if len(svc.Spec.Selector) == 0 {
			errs = append(errs, objErr("Service", svc.Name, "no selector"))
			continue
		}
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		var matched []Workload
		for _, w := range ws {
			if w.Object.GetNamespace() == svc.Namespace && sel.Matches(labels.Set(w.Template.Labels)) {
				matched = append(matched, w)
			}
		}
		if len(matched) == 0 {
			errs = append(errs, objErr("Service", svc.Name, "selector %v matches no workload", svc.Spec.Selector))
			continue
		}
		for _, p := range svc.Spec.Ports {
			if p.TargetPort.StrVal == "" {
				continue
			}
			for _, w := range matched {
				if !declaresPort(w.Template.Spec, p.TargetPort.StrVal) {
					errs = append(errs, objErr("Service", svc.Name, "port %s targets %q, which %s does not declare", p.Name, p.TargetPort.StrVal, w.Name()))
				}
			}
		}
	}
	return errs
}

// checkScaling: HorizontalPodAutoscalers target rendered workloads that do
// not also fix their replica count, and PodDisruptionBudgets select
// workloads.
func checkScaling(s *Set, ws []Workload) []error {
	var errs []error
	for _, o := range s.OfKind("HorizontalPodAutoscaler") {
		var h autoscalingv2.HorizontalPodAutoscaler
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &h); err != nil {
			errs = append(errs, fmt.Errorf("decoding HorizontalPodAutoscaler %s: %w", o.GetName(), err))
			continue
		}
		ref := h.Spec.ScaleTargetRef
		target := s.Get(ref.Kind, h.Namespace, ref.Name)
		if target == nil {
			errs = append(errs, objErr("HorizontalPodAutoscaler", h.Name, "target %s %s is not in the rendering", ref.Kind, ref.Name))
			continue
		}
		if _, has, _ := unstructured.NestedFieldNoCopy(target.Object, "spec", "replicas"); has {
			errs = append(errs, objErr("HorizontalPodAutoscaler", h.Name, "%s %s sets spec.replicas, which every apply would reset", ref.Kind, ref.Name))
		}
	}
	for _, o := range s.OfKind("PodDisruptionBudget") {
		var pdb policyv1.PodDisruptionBudget
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &pdb); err != nil {
			errs = append(errs, fmt.Errorf("decoding PodDisruptionBudget %s: %w", o.GetName(), err))
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() {
			errs = append(errs, objErr("PodDisruptionBudget", pdb.Name, "bad or empty selector"))
			continue
		}
		matches := slices.ContainsFunc(ws, func(w Workload) bool {
			return w.Object.GetNamespace() == pdb.Namespace && sel.Matches(labels.Set(w.Template.Labels))
		})
		if !matches {
			errs = append(errs, objErr("PodDisruptionBudget", pdb.Name, "selects no workload"))
		}
	}
	return errs
}

// objErr reports a violation by the object kind/name.
func objErr(kind, name, format string, args ...any) error {
	return fmt.Errorf("%s %s: %s", kind, name, fmt.Sprintf(format, args...))
}

func declaresPort(spec corev1.PodSpec, name string) bool {
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

func keysOf(items []corev1.KeyToPath) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.Key)
	}
	return out
}

// lastPathElem is the image reference after its last "/" (so a registry
// port is not mistaken for a tag).
func lastPathElem(image string) string {
	if i := strings.LastIndex(image, "/"); i >= 0 {
		return image[i+1:]
	}
	return image
}
