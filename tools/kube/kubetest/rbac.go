package kubetest

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// rbacKinds are the kinds ApplyRBAC applies: ServiceAccounts and the RBAC
// objects that grant them access.
var rbacKinds = map[string]struct {
	resource   schema.GroupVersionResource
	namespaced bool
}{
	"ServiceAccount":     {schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, true},
	"Role":               {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, true},
	"RoleBinding":        {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}, true},
	"ClusterRole":        {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, false},
	"ClusterRoleBinding": {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}, false},
}

// ApplyRBAC applies, with the admin credentials, the ServiceAccounts,
// Roles, RoleBindings, ClusterRoles and ClusterRoleBindings among objs (a
// rendering of deploy/kustomize, see the manifests package) for real, as a
// deployment in namespace ns would get them; other kinds are ignored. It
// returns how many objects it applied.
//
// The rules stay as rendered; only where the objects live changes, so that
// renderings applied to different namespaces of one server do not share
// anything: namespaced objects move to ns, except those the rendering
// puts in "default" (the Role for Events about Nodes), which stay there;
// the names of cluster-scoped objects and of those in "default" get "-"+ns
// appended (and so do the role references to them); binding subjects
// that are ServiceAccounts move to ns.
func (c *Cluster) ApplyRBAC(ctx context.Context, objs []*unstructured.Unstructured, ns string) (int, error) {
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		return 0, err
	}
	applied := 0
	for _, o := range objs {
		kind, ok := rbacKinds[o.GetKind()]
		if !ok {
			continue
		}
		o = o.DeepCopy()
		isolated := !kind.namespaced || o.GetNamespace() == metav1.NamespaceDefault
		if isolated {
			o.SetName(o.GetName() + "-" + ns)
		}
		if o.GetKind() == "RoleBinding" || o.GetKind() == "ClusterRoleBinding" {
			if err := relocateBinding(o, ns); err != nil {
				return applied, err
			}
		}
		ri := dynamic.ResourceInterface(dyn.Resource(kind.resource))
		if kind.namespaced {
			if o.GetNamespace() != metav1.NamespaceDefault {
				o.SetNamespace(ns)
			}
			ri = dyn.Resource(kind.resource).Namespace(o.GetNamespace())
		}
		_, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: "kubetest", Force: true})
		if err != nil {
			return applied, fmt.Errorf("kubetest: applying %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		applied++
	}
	return applied, nil
}

// relocateBinding points a binding at the renamed role (a ClusterRole, or
// a Role in "default") and at the ServiceAccounts of namespace ns.
func relocateBinding(o *unstructured.Unstructured, ns string) error {
	refKind, _, _ := unstructured.NestedString(o.Object, "roleRef", "kind")
	if refKind == "ClusterRole" || o.GetNamespace() == metav1.NamespaceDefault {
		ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
		if err := unstructured.SetNestedField(o.Object, ref+"-"+ns, "roleRef", "name"); err != nil {
			return err
		}
	}
	subjects, _, err := unstructured.NestedSlice(o.Object, "subjects")
	if err != nil {
		return fmt.Errorf("kubetest: %s %s: %w", o.GetKind(), o.GetName(), err)
	}
	for _, s := range subjects {
		if sub, ok := s.(map[string]any); ok && sub["kind"] == "ServiceAccount" {
			sub["namespace"] = ns
		}
	}
	return unstructured.SetNestedSlice(o.Object, subjects, "subjects")
}

// serviceAccountConfig creates the ServiceAccount namespace/name when it
// does not exist and returns a configuration with a bound token for it
// from the TokenRequest API, valid for expiry.
func (c *Cluster) serviceAccountConfig(ctx context.Context, namespace, name string, expiry time.Duration) (*rest.Config, error) {
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return nil, err
	}
	sas := cs.CoreV1().ServiceAccounts(namespace)
	_, err = sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("kubetest: creating ServiceAccount %s/%s: %w", namespace, name, err)
	}
	seconds := int64(expiry / time.Second)
	tr, err := sas.CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("kubetest: requesting a token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return &rest.Config{
		Host:            c.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.caPEM},
		BearerToken:     tr.Status.Token,
		QPS:             200,
		Burst:           400,
	}, nil
}

// ServiceAccountKubeconfig writes a kubeconfig file for the ServiceAccount
// namespace/name next to the admin one (Kubeconfig), named
// "kubeconfig-<namespace>-<name>", and returns its path: what a program
// that loads kubeconfig files (a service started with --kubeconfig) needs
// to run with that account's RBAC, as in a pod. The ServiceAccount is
// created when it does not exist; its bound token (TokenRequest API) is
// valid for expiry (at least 10 minutes, the API's minimum) and is not
// refreshed. The context's namespace is namespace.
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, namespace, name string, expiry time.Duration) (string, error) {
	cfg, err := c.serviceAccountConfig(ctx, namespace, name, expiry)
	if err != nil {
		return "", err
	}
	user := "system:serviceaccount:" + namespace + ":" + name
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: user, Namespace: namespace}
	kc.CurrentContext = "kubetest"
	path := filepath.Join(filepath.Dir(c.Kubeconfig), "kubeconfig-"+namespace+"-"+name)
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", fmt.Errorf("kubetest: writing the kubeconfig of ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return path, nil
}
