// Package health serves a service's operational endpoints on one port:
// /livez (the process is alive), /readyz (its dependencies are usable:
// NATS connected, KV reachable, consumer bound) and /metrics (Prometheus).
package health

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check reports whether one dependency is usable; nil means ready.
type Check func(ctx context.Context) error

// Checks is a set of named readiness checks, safe for concurrent use.
type Checks struct {
	mu     sync.RWMutex
	checks map[string]Check
}

// Add registers (or replaces) a readiness check.
func (c *Checks) Add(name string, check Check) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.checks == nil {
		c.checks = map[string]Check{}
	}
	c.checks[name] = check
}

// Run runs every check with a short timeout and returns failures by name.
// A set with no checks is not ready: the service has not finished starting
// (every service registers its checks as it connects).
func (c *Checks) Run(ctx context.Context) map[string]string {
	c.mu.RLock()
	if len(c.checks) == 0 {
		c.mu.RUnlock()
		return map[string]string{"startup": "no readiness checks registered yet"}
	}
	names := make([]string, 0, len(c.checks))
	for n := range c.checks {
		names = append(names, n)
	}
	checks := make(map[string]Check, len(c.checks))
	for n, f := range c.checks {
		checks[n] = f
	}
	c.mu.RUnlock()
	sort.Strings(names)
	failed := map[string]string{}
	for _, n := range names {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := checks[n](cctx); err != nil {
			failed[n] = err.Error()
		}
		cancel()
	}
	return failed
}

// Handler serves /livez, /readyz and /metrics from g.
func Handler(checks *Checks, g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		failed := checks.Run(r.Context())
		w.Header().Set("Content-Type", "application/json")
		if len(failed) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]any{"ready": false, "failed": failed})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": true})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	return mux
}
