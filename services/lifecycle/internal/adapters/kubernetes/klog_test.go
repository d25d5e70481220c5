package kubernetes_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/libs/logging/logtest"

	"k8s.io/klog/v2"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/kubernetes"
)

// client-go logs through klog; RouteKlog sends them to the service's
// structured logger, tagged as client-go.
func TestRouteKlogSendsClientGoLogsToSlog(t *testing.T) {
	var buf logtest.Buffer
	kubernetes.RouteKlog(slog.New(slog.NewJSONHandler(&buf, nil)))
	klog.InfoS("watch restarted", "resource", "nodes")
	klog.Flush()
	var found bool
	for line := range strings.Lines(buf.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		if rec["msg"] == "watch restarted" {
			found = true
			if rec["component"] != "client-go" || rec["resource"] != "nodes" {
				t.Errorf("record %v: want component=client-go and the key/value pairs", rec)
			}
		}
	}
	if !found {
		t.Fatalf("klog record not in the slog output: %q", buf.String())
	}
}
