// Package metrics holds the Prometheus helpers every service shares.
package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg, or returns the collector already registered
// under the same descriptor, so several components (or a restarted one) can
// share one registry. Any other registration error is a programming error
// (conflicting help or labels for one name) and panics at start-up.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(fmt.Sprintf("registering metrics: %v", err))
	}
	return c
}
