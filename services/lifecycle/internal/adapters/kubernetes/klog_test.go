package kubernetes_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"k8s.io/klog/v2"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/kubernetes"
)

// client-go logs through klog; RouteKlog sends them to the service's
// structured logger, tagged as client-go.
func TestRouteKlogSendsClientGoLogsToSlog(t *testing.T) {
	var buf syncBuffer
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

// syncBuffer is a bytes.Buffer safe for the concurrent writes of loggers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
