package manifests_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// gatewayAddr matches an in-cluster name of the gateway, with its port if
// one is given: "api-gateway.nodesmith.svc:8086",
// "x-api-gateway.kube-system.svc.cluster.local".
var gatewayAddr = regexp.MustCompile(`[a-z0-9-]*gateway[a-z0-9-]*\.[a-z0-9-]+\.svc(?:\.cluster\.local)?(?::[0-9]+)?`)

// TestDocsNameTheGatewayService: the gateway's in-cluster address has one
// source of truth, the Service of deploy/kustomize. Every place that names
// it (the READMEs' cloud-config and certificate examples, the rendered
// cloud-configs and certificate SANs, checked by checkCommon and
// checkMTLS) names that Service, in its namespace, on one of its ports.
func TestDocsNameTheGatewayService(t *testing.T) {
	k := kustomizeDir(t)
	s := rendering{dir: filepath.Join(generatedKustomizeDir(t), "overlays", "prod")}.render(t)
	var svc corev1.Service
	mustInto(t, s, "Service", namespace, "api-gateway", &svc)
	host := svc.Name + "." + svc.Namespace + ".svc"
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, strconv.Itoa(int(p.Port)))
	}

	root := filepath.Dir(filepath.Dir(k))
	found := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "bin" || d.Name() == "kube-apiserver-build") {
			return filepath.SkipDir
		}
		if ext := filepath.Ext(path); d.IsDir() || ext != ".md" && ext != ".yaml" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range gatewayAddr.FindAllString(line, -1) {
				found++
				h, port, _ := strings.Cut(m, ":")
				if h != host && h != host+".cluster.local" {
					t.Errorf("%s:%d names the gateway %q; the Service is %s", rel, i+1, m, host)
				}
				if port != "" && !slices.Contains(ports, port) {
					t.Errorf("%s:%d names gateway port %s; the Service has %v", rel, i+1, port, ports)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 3 {
		t.Fatalf("found %d mentions of the gateway's address in the docs and manifests; the search is broken", found)
	}
}
