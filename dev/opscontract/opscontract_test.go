// Package opscontract runs the gateway's opstest, the lifecycle operations
// contract, against the real lifecycle service over real NATS (with the
// real permission model: the suite requests as the API gateway). The
// gateway runs the same suite against its fake lifecycle.
package opscontract

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/logging/logtest"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
	"github.com/nodesmith/nodesmith/services/api-gateway/opstest"
	lifecycle "github.com/nodesmith/nodesmith/services/lifecycle/service"
)

const config = `
accounts:
  dev:
    region: ap-guangzhou
instanceTemplates:
  small:
    account: dev
    zone: ap-guangzhou-3
    instanceType: S5.MEDIUM4
    parameters:
      ImageId: img-123
nodeGroups:
  - id: from-config
    minSize: 0
    maxSize: 3
    instanceTemplate: small
`

func TestRealLifecycle(t *testing.T) {
	env := natstest.Start(t)
	cfg := lifecycle.DefaultConfig()
	cfg.HealthAddr = ""
	cfg.ConfigData = []byte(config)
	cfg.ReconcileInterval = 0
	cfg.ShutdownGrace = 2 * time.Second
	cfg.Cluster = lifecycle.ClusterNone
	nc, _ := env.Connect(t)
	// Lifecycle's warnings (a record write that failed, for one) are shown
	// when the test fails.
	var logs logtest.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("lifecycle's warnings:\n%s", logs.String())
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- lifecycle.Run(ctx, cfg, lifecycle.Deps{Conn: nc, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("lifecycle.Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("lifecycle did not stop within 30s")
		}
	})
	gw, _ := env.ConnectAs(t, natsauth.APIGateway)
	tg := opstest.Target{Conn: gw, Template: &statev1.InstanceTemplate{Name: "small"}, ConfigGroup: "from-config", ConfigAccount: "dev"}
	tg.WaitReady(t)
	opstest.Run(t, tg)
}
