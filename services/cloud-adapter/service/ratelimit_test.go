package service_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/logging/logtest"
	"github.com/nodesmith/nodesmith/libs/metrics/metricstest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/service"
)

// TestRateLimitsAreLoggedAndExposed: the limits are the replica's own, so
// operators must be able to see them: logged at start, exported as gauges,
// and the time calls wait for them as a histogram.
func TestRateLimitsAreLoggedAndExposed(t *testing.T) {
	srv := startEmulator(t, nil)
	s := newStack(t)
	cfg := emulatorConfig(srv)
	cfg.TencentRateLimits = "RunInstances=3:1,TerminateInstances=8:2,DescribeInstances=16.5:4"
	reg := prometheus.NewRegistry()
	logs := &logtest.Buffer{}
	r := s.startReplica("limits", cfg, service.Deps{
		Environ: credentialsEnv, Registry: reg, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	})
	r.waitReady(t)

	var logged map[string]any
	eventually(t, 20*time.Second, "the service to start", func() bool {
		for line := range strings.SplitSeq(logs.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil {
				continue
			}
			// One line per provider; this test is about the emulator's.
			if msg, _ := rec["msg"].(string); strings.Contains(msg, "rate limits per replica") && rec["provider"] == provider {
				logged = rec
			}
		}
		return strings.Contains(logs.String(), "cloud adapter started")
	})
	if logged == nil || logged["limits"] != "DescribeInstances=16.5:4,RunInstances=3:1,TerminateInstances=8:2" || logged["provider"] != provider {
		t.Fatalf("start-up log of the rate limits = %v; logs:\n%s", logged, logs.String())
	}

	for _, tc := range []struct {
		action      string
		rate, burst float64
	}{
		{"RunInstances", 3, 1},
		{"TerminateInstances", 8, 2},
		{"DescribeInstances", 16.5, 4},
	} {
		labels := map[string]string{"provider": provider, "action": tc.action}
		if got := metricstest.Value(t, reg, "nodesmith_cloud_rate_limit_per_second", labels); got != tc.rate {
			t.Errorf("rate limit of %s = %v, want %v", tc.action, got, tc.rate)
		}
		if got := metricstest.Value(t, reg, "nodesmith_cloud_rate_limit_burst", labels); got != tc.burst {
			t.Errorf("burst of %s = %v, want %v", tc.action, got, tc.burst)
		}
	}

	s.publish(messaging.SubjectCloudCreate, "create.rl", createCommand(provider, "rl", 1))
	eventually(t, 20*time.Second, "created event", func() bool { _, n := s.createdMapping(); return n == 1 })
	if waits := metricstest.Value(t, reg, "nodesmith_cloud_rate_limit_wait_seconds", map[string]string{"provider": provider, "action": "RunInstances"}); waits != 1 {
		t.Errorf("rate limiter waits observed for RunInstances = %v, want 1", waits)
	}
}
