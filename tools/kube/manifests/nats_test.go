package manifests_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

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
// and route, each service presenting its own client certificate.
func checkNATSTLS(t *testing.T, s *manifests.Set) {
	t.Helper()
	for _, key := range []string{"nats-tls.conf", "nats-route-tls.conf"} {
		c := configMapData(t, s, "nats-config", key)
		if !strings.Contains(c, "tls {") || !strings.Contains(c, "verify: true") {
			t.Errorf("%s: no verified TLS", key)
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
	if got := secretBehind(natsW, nats, "/etc/nats-tls/tls.crt"); got != "nats-server-tls" {
		t.Errorf("NATS's certificate comes from %q, want nats-server-tls", got)
	}
	server := certificate(t, s, "nats-server")
	for _, dns := range []string{"nats", "*.nats-headless"} {
		if !slices.Contains(server.DNSNames, dns) {
			t.Errorf("the NATS server certificate lacks %s (clients dial nats, routes nats-N.nats-headless)", dns)
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
		if certificate(t, s, id+"-nats-client").SecretName != id+"-nats-tls" {
			t.Errorf("no client certificate for %s", id)
		}
	}
}
