package manifests_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nodesmith/nodesmith/tools/kube/manifests"
)

// generatedName strips the content hash a secretGenerator appends.
var hashSuffix = regexp.MustCompile(`-[a-z0-9]{10}$`)

func generatedName(name string) string { return hashSuffix.ReplaceAllString(name, "") }

func nkeyEnv(id string) string {
	return "NODESMITH_NKEY_" + strings.ToUpper(strings.ReplaceAll(id, "-", "_"))
}

// checkNATSAuth: every rendering admits only the four NKey users (no
// anonymous access), NATS gets their public keys from the Secret
// nats-users, and each service mounts its own seed where
// NODESMITH_NATS_NKEY_FILE points.
func checkNATSAuth(t *testing.T, s *manifests.Set) {
	t.Helper()
	conf := configMapData(t, s, "nats-config", "nats.conf")
	if !strings.Contains(conf, "\ninclude nats-authorization.conf\n") {
		t.Error("nats.conf does not include nats-authorization.conf: NATS would admit anonymous clients")
	}
	auth := configMapData(t, s, "nats-config", "nats-authorization.conf")
	if !strings.Contains(auth, "authorization {") || strings.Contains(auth, "no_auth_user") {
		t.Error("nats-authorization.conf has no authorization block, or a no_auth_user")
	}
	_, nats := workload(t, s, "StatefulSet", "nats")
	for _, id := range services {
		if !strings.Contains(auth, "nkey: $"+nkeyEnv(id)+"\n") {
			t.Errorf("nats-authorization.conf has no user for %s", id)
		}
		i := slices.IndexFunc(nats.Env, func(e corev1.EnvVar) bool { return e.Name == nkeyEnv(id) })
		if i < 0 || nats.Env[i].ValueFrom == nil || nats.Env[i].ValueFrom.SecretKeyRef == nil {
			t.Errorf("NATS does not read %s from a Secret", nkeyEnv(id))
			continue
		}
		ref := nats.Env[i].ValueFrom.SecretKeyRef
		if generatedName(ref.Name) != "nats-users" || ref.Key != id {
			t.Errorf("NATS reads %s from Secret %s key %s, want nats-users key %s", nkeyEnv(id), ref.Name, ref.Key, id)
		}

		w, c := workload(t, s, "Deployment", id)
		seed, _ := s.EnvValue(w, c, "NODESMITH_NATS_NKEY_FILE")
		if seed == "" {
			t.Errorf("%s: no NODESMITH_NATS_NKEY_FILE", id)
			continue
		}
		if got := generatedName(secretBehind(w, c, seed)); got != "nats-nkey-"+id {
			t.Errorf("%s: NODESMITH_NATS_NKEY_FILE=%s is in Secret %q, want nats-nkey-%s", id, seed, got, id)
		}
		if m, rel := mountFor(c, seed); m == nil || rel != "seed" {
			t.Errorf("%s: %s is not the seed key of a mounted Secret", id, seed)
		}
	}
}

// checkNATSTLS: TLS with verified certificates on every client connection
// and route, each service presenting its own client certificate. The
// routes trust their own CA, not the one that issues the services' client
// certificates: a route is not subject to the NKey permissions, so a
// service's certificate opening one would bypass them all.
func checkNATSTLS(t *testing.T, s *manifests.Set) {
	t.Helper()
	files := map[string]map[string]string{} // key -> cert_file, key_file, ca_file -> path
	for _, key := range []string{"nats-tls.conf", "nats-route-tls.conf"} {
		c := configMapData(t, s, "nats-config", key)
		if !strings.Contains(c, "tls {") || !strings.Contains(c, "verify: true") {
			t.Errorf("%s: no verified TLS", key)
		}
		files[key] = map[string]string{}
		for _, m := range tlsFileLine.FindAllStringSubmatch(c, -1) {
			files[key][m[1]] = m[2]
		}
	}
	conf := configMapData(t, s, "nats-config", "nats.conf")
	cluster := conf[strings.Index(conf, "cluster {"):]
	if !strings.Contains(cluster, "include nats-route-tls.conf") {
		t.Error("the cluster block does not include the route TLS")
	}
	if !strings.Contains(conf, "\ninclude nats-tls.conf\n") {
		t.Error("nats.conf does not include the client TLS")
	}
	natsW, nats := workload(t, s, "StatefulSet", "nats")
	// Every file of each TLS block comes from one Secret, written by one
	// Certificate.
	secretOf := func(key, want string) string {
		t.Helper()
		var secret string
		for _, f := range []string{"cert_file", "key_file", "ca_file"} {
			path := files[key][f]
			got := secretBehind(natsW, nats, path)
			if got != want {
				t.Errorf("%s: %s %q comes from Secret %q, want %s", key, f, path, got, want)
			}
			secret = got
		}
		return secret
	}
	clientSecret := secretOf("nats-tls.conf", "nats-server-tls")
	routeSecret := secretOf("nats-route-tls.conf", "nats-route-tls")
	server := certificate(t, s, "nats-server")
	if !slices.Contains(server.DNSNames, "nats") {
		t.Error("the NATS server certificate lacks nats (clients dial nats)")
	}
	route := certificate(t, s, "nats-route")
	if route.SecretName != routeSecret {
		t.Errorf("Certificate nats-route writes %q, want %s", route.SecretName, routeSecret)
	}
	if !slices.Contains(route.DNSNames, "*.nats-headless") {
		t.Error("the NATS route certificate lacks *.nats-headless (routes dial nats-N.nats-headless)")
	}
	for _, u := range []string{"server auth", "client auth"} {
		if !slices.Contains(route.Usages, u) {
			t.Errorf("the NATS route certificate lacks the usage %q (each server accepts and dials routes)", u)
		}
	}
	if server.SecretName != clientSecret {
		t.Errorf("Certificate nats-server writes %q, want %s", server.SecretName, clientSecret)
	}
	// The CAs: each issuer a ca Issuer of the set, their CA Secrets distinct.
	clientCA, routeCA := caIssuerSecret(t, s, server.IssuerRef.Kind, server.IssuerRef.Name), caIssuerSecret(t, s, route.IssuerRef.Kind, route.IssuerRef.Name)
	if server.IssuerRef.Name == route.IssuerRef.Name || clientCA == routeCA {
		t.Errorf("the routes and the clients share a CA (issuers %s and %s, CA Secrets %s and %s): a service's client certificate would open a route", route.IssuerRef.Name, server.IssuerRef.Name, routeCA, clientCA)
	}
	// The route issuer issues the route certificate only: anything else it
	// signs could join the cluster.
	for _, o := range s.OfKind("Certificate") {
		c := certificate(t, s, o.GetName())
		if o.GetName() != "nats-route" && c.IssuerRef.Name == route.IssuerRef.Name && c.IssuerRef.Kind == route.IssuerRef.Kind {
			t.Errorf("Certificate %s is issued by the route issuer %s: it could open a NATS route", o.GetName(), route.IssuerRef.Name)
		}
	}
	for _, id := range services {
		w, c := workload(t, s, "Deployment", id)
		for _, env := range []string{"NODESMITH_NATS_CA_FILE", "NODESMITH_NATS_CERT_FILE", "NODESMITH_NATS_KEY_FILE"} {
			path, _ := s.EnvValue(w, c, env)
			if got := secretBehind(w, c, path); got != id+"-nats-tls" {
				t.Errorf("%s: %s=%q is in Secret %q, want %s-nats-tls", id, env, path, got, id)
			}
		}
		cert := certificate(t, s, id+"-nats-client")
		if cert.SecretName != id+"-nats-tls" {
			t.Errorf("no client certificate for %s", id)
		}
		if ca := caIssuerSecret(t, s, cert.IssuerRef.Kind, cert.IssuerRef.Name); ca != clientCA {
			t.Errorf("%s's client certificate is from CA Secret %s, want the client CA %s", id, ca, clientCA)
		}
		for _, v := range w.Template.Spec.Volumes {
			if v.Secret != nil && (v.Secret.SecretName == routeSecret || v.Secret.SecretName == routeCA) {
				t.Errorf("%s mounts Secret %s (the route certificate or CA)", id, v.Secret.SecretName)
			}
		}
	}
}

// tlsFileLine matches a cert_file, key_file or ca_file line of a NATS tls block.
var tlsFileLine = regexp.MustCompile(`(?m)^\s*(cert_file|key_file|ca_file):\s*"?([^"\s]+)"?\s*$`)

// caIssuerSecret is the CA Secret of a ca Issuer of the set.
func caIssuerSecret(t *testing.T, s *manifests.Set, kind, name string) string {
	t.Helper()
	if kind != "" && kind != "Issuer" {
		t.Fatalf("issuer %s %s: want an Issuer of the rendering", kind, name)
	}
	o := s.Get("Issuer", namespace, name)
	if o == nil {
		t.Fatalf("no Issuer %s", name)
	}
	secret, ok, _ := unstructured.NestedString(o.Object, "spec", "ca", "secretName")
	if !ok || secret == "" {
		t.Fatalf("Issuer %s is not a ca Issuer", name)
	}
	return secret
}
