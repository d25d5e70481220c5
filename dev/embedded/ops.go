package embedded

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nodesmith/nodesmith/libs/health"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// component is one in-process service as the combined ops endpoint sees it:
// its own metrics registry and readiness checks, exactly as it would have in
// its own pod.
type component struct {
	name     string
	registry *prometheus.Registry
	checks   *health.Checks
}

// Test hooks, set only by tests in this package: componentsHook sees the
// components of each Run as soon as they exist (their registries are the
// services' real ones, which the metric tests inspect); emulatorHook sees
// the CVM emulator (to inject faults).
var (
	componentsHook func(map[string]*component)
	emulatorHook   func(*cvmemu.Server)
	// natsUsersHook may add a test's own NATS user (an observer of the
	// whole bus) to the services' ones.
	natsUsersHook func([]*server.NkeyUser) []*server.NkeyUser
)

func newComponent(name string) *component {
	return &component{name: name, registry: prometheus.NewRegistry(), checks: &health.Checks{}}
}

// ready reports the component's failing checks as one error.
func (c *component) ready(ctx context.Context) error {
	failed := c.checks.Run(ctx)
	if len(failed) == 0 {
		return nil
	}
	parts := make([]string, 0, len(failed))
	for name, msg := range failed {
		parts = append(parts, name+": "+msg)
	}
	sort.Strings(parts)
	return fmt.Errorf("%s", strings.Join(parts, "; "))
}

// opsHandler serves one /livez, /readyz and /metrics for every component:
// metrics from all registries plus the process collectors, readiness as the
// union of every component's checks.
func opsHandler(comps []*component) http.Handler {
	process := prometheus.NewRegistry()
	process.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	gatherers := prometheus.Gatherers{process}
	all := &health.Checks{}
	for _, c := range comps {
		gatherers = append(gatherers, c.registry)
		all.Add(c.name, c.ready)
	}
	return health.Handler(all, gatherers)
}
