package service_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/providerid"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/fakelifecycle"
	"github.com/nodesmith/nodesmith/services/api-gateway/service"
)

const (
	adminToken    = "conformance-admin-token-0123"
	readOnlyToken = "conformance-reader-token-0123"
	gpuLabel      = "nodesmith.io/gpu-type"
)

// gateway is a running api-gateway over a real embedded JetStream, with a
// fake lifecycle answering its operations.
type gateway struct {
	addrs     service.Addrs
	env       *natstest.Env
	lifecycle *fakelifecycle.Responder
	// stop ends service.Run (graceful shutdown); the test's cleanup
	// checks that it returned.
	stop func()
}

// startGateway seeds the buckets, starts a fake lifecycle and the gateway
// (through service.Run, as main and the embedded launcher do) and waits
// until it is ready.
func startGateway(t *testing.T, mutate func(*service.Config)) *gateway {
	t.Helper()
	return startGatewayWith(t, mutate, nil)
}

// startGatewayWith is startGateway with extra dependencies set by
// mutateDeps.
func startGatewayWith(t *testing.T, mutate func(*service.Config), mutateDeps func(*service.Deps)) *gateway {
	t.Helper()
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	lcConn, lcJS := env.Connect(t)
	lc, err := fakelifecycle.Start(ctx, lcConn, lcJS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Stop)
	seed(t, ctx, lc)

	cfg := service.DefaultConfig()
	cfg.GRPCAddr, cfg.RESTAddr, cfg.HealthAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.GRPCInsecure, cfg.RESTInsecure = true, true
	cfg.AdminTokens, cfg.ReadOnlyTokens = []string{adminToken}, []string{readOnlyToken}
	cfg.GPULabel = gpuLabel
	cfg.ShutdownGrace = 5 * time.Second
	if mutate != nil {
		mutate(&cfg)
	}
	gwConn, _ := env.ConnectAs(t, natsauth.APIGateway)
	ready := make(chan service.Addrs, 1)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	deps := service.Deps{Logger: log, Conn: gwConn, OnReady: func(a service.Addrs) { ready <- a }}
	if mutateDeps != nil {
		mutateDeps(&deps)
	}
	go func() {
		done <- service.Run(runCtx, cfg, deps)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("service.Run returned %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("service.Run did not return after shutdown")
		}
	})
	select {
	case a := <-ready:
		return &gateway{addrs: a, env: env, lifecycle: lc, stop: stop}
	case err := <-done:
		t.Fatalf("service.Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("gateway not ready after 30s")
	}
	return nil
}

// seed writes the initial state as lifecycle would.
func seed(t *testing.T, ctx context.Context, lc *fakelifecycle.Responder) {
	t.Helper()
	groups := []*statev1.NodeGroup{
		{
			Id: "web", MinSize: 1, MaxSize: 10, TargetSize: 3, Source: "config",
			InstanceTemplate: &statev1.InstanceTemplate{Name: "std", Provider: "tencentcloud", Region: "ap-guangzhou", Zone: "ap-guangzhou-3", InstanceType: "S5.LARGE8", HourlyPrice: 0.5},
			NodeTemplate: &statev1.NodeTemplate{
				Labels:   map[string]string{"role": "web"},
				Taints:   []*statev1.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}},
				Capacity: map[string]string{"cpu": "4", "memory": "8Gi"},
			},
			AutoscalingOptions: &statev1.AutoscalingOptions{ScaleDownUnneeded: durationpb.New(2 * time.Minute)},
		},
		{
			Id: "gpu", MinSize: 0, MaxSize: 4, TargetSize: 1,
			InstanceTemplate: &statev1.InstanceTemplate{Name: "gn7", Provider: "tencentcloud", Region: "ap-guangzhou", Zone: "ap-guangzhou-4", InstanceType: "GN7.2XLARGE32", HourlyPrice: 2},
			NodeTemplate: &statev1.NodeTemplate{
				Labels:   map[string]string{gpuLabel: "nvidia-t4"},
				Capacity: map[string]string{"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
			},
		},
		{Id: "bare", MinSize: 0, MaxSize: 2},
	}
	running := statev1.InstanceState_INSTANCE_STATE_RUNNING
	creating := statev1.InstanceState_INSTANCE_STATE_CREATING
	ago := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(time.Now().Add(-d)) }
	tr := func(from, to statev1.InstanceState, reason string, d time.Duration) *statev1.Transition {
		return &statev1.Transition{From: from, To: to, Reason: reason, At: ago(d)}
	}
	instances := []*statev1.Instance{
		{Id: "i-web-0", Group: "web", State: statev1.InstanceState_INSTANCE_STATE_DELETED, ProviderId: "tencentcloud:///ap-guangzhou/ins-web0", NodeName: "10.0.0.10"},
		{
			Id: "i-web-1", Group: "web", State: running, ProviderId: "tencentcloud:///ap-guangzhou/ins-web1", NodeName: "10.0.0.11",
			Zone: "ap-guangzhou-3", InstanceType: "S5.LARGE8", CapacityType: "on-demand",
			CreatedAt: ago(2 * time.Hour), StateSince: ago(100 * time.Minute),
			History: []*statev1.Transition{
				tr(statev1.InstanceState_INSTANCE_STATE_PENDING, creating, "dispatched in batch b-1", 119*time.Minute),
				tr(statev1.InstanceState_INSTANCE_STATE_JOINED, running, "node 10.0.0.11 is Ready", 100*time.Minute),
			},
		},
		{Id: "i-web-2", Group: "web", State: running, ProviderId: "tencentcloud:///ap-guangzhou/ins-web2", NodeName: "10.0.0.12"},
		{Id: "i-web-3", Group: "web", State: statev1.InstanceState_INSTANCE_STATE_CREATING, ProviderId: providerid.Placeholder("web", "i-web-3")},
		{
			Id: "i-gpu-1", Group: "gpu", State: statev1.InstanceState_INSTANCE_STATE_CREATING, ProviderId: providerid.Placeholder("gpu", "i-gpu-1"),
			CreationFailed: true, LastError: &statev1.ErrorInfo{Code: "ResourceInsufficient.SpecifiedInstanceType", Message: "sold out in ap-guangzhou-4", Class: 1, At: ago(time.Minute)},
			CreatedAt: ago(3 * time.Minute), StateSince: ago(2 * time.Minute),
			History: []*statev1.Transition{tr(statev1.InstanceState_INSTANCE_STATE_PENDING, creating, "dispatched in batch b-2", 2*time.Minute)},
		},
	}
	for _, g := range groups {
		if _, err := lc.PutGroup(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	for _, in := range instances {
		if _, err := lc.PutInstance(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
}
