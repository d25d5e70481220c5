package service

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// trackingRegisterer remembers what Run registered so it can unregister it
// when Run returns: a host that restarts the gateway in-process (the
// embedded launcher's fault tests) with the same registry would otherwise
// fail with duplicate registrations, or keep exporting the dead instance's
// gauges.
type trackingRegisterer struct {
	reg prometheus.Registerer

	mu         sync.Mutex
	collectors []prometheus.Collector
}

var _ prometheus.Registerer = (*trackingRegisterer)(nil)

func (t *trackingRegisterer) Register(c prometheus.Collector) error {
	if err := t.reg.Register(c); err != nil {
		return err
	}
	t.mu.Lock()
	t.collectors = append(t.collectors, c)
	t.mu.Unlock()
	return nil
}

func (t *trackingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

func (t *trackingRegisterer) Unregister(c prometheus.Collector) bool { return t.reg.Unregister(c) }

// unregisterAll removes everything registered through t.
func (t *trackingRegisterer) unregisterAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.collectors {
		t.reg.Unregister(c)
	}
	t.collectors = nil
}
