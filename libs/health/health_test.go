package health

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestReadiness(t *testing.T) {
	checks := &Checks{}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "nodesmith_probe_total", Help: "p"}))
	h := Handler(checks, reg)

	if code, body := get(t, h, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "startup") {
		t.Errorf("no checks registered yet must not be ready: %d %s", code, body)
	}
	failing := errors.New("nats disconnected")
	checks.Add("nats", func(context.Context) error { return failing })
	if code, body := get(t, h, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "nats disconnected") {
		t.Errorf("failing check: %d %s", code, body)
	}
	checks.Add("nats", func(context.Context) error { return nil })
	if code, _ := get(t, h, "/readyz"); code != http.StatusOK {
		t.Errorf("passing checks: %d", code)
	}
	if code, _ := get(t, h, "/livez"); code != http.StatusOK {
		t.Errorf("livez: %d", code)
	}
	if code, body := get(t, h, "/metrics"); code != http.StatusOK || !strings.Contains(body, "nodesmith_probe_total") {
		t.Errorf("metrics: %d", code)
	}
}
