package messaging_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsconn"
	"github.com/nodesmith/nodesmith/libs/natstest"
)

func TestConnectOwnsOnlyTheConnectionItMakes(t *testing.T) {
	env := natstest.StartIn(t, t.TempDir(), false) // no topology yet: Connect ensures it
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	nc, js, closeConn, err := messaging.Connect(ctx, nil, natsconn.Options{URL: env.Server.ClientURL()}, messaging.DefaultOptions(), "svc", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if got := nc.Opts.Name; got != "svc" {
		t.Errorf("connection name = %q, want the service name", got)
	}
	if _, err := js.KeyValue(ctx, messaging.BucketInstances); err != nil {
		t.Errorf("topology not ensured: %v", err)
	}
	closeConn()
	if !nc.IsClosed() {
		t.Error("close should drain and close a connection Connect made")
	}

	injected, _ := env.Connect(t)
	got, _, closeConn, err := messaging.Connect(ctx, injected, natsconn.Options{}, messaging.DefaultOptions(), "svc", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if got != injected {
		t.Error("an injected connection should be used as is")
	}
	closeConn()
	if injected.IsClosed() {
		t.Error("close must leave the host's connection open")
	}
}

func TestConnectFailsWhenTheTopologyIsRefused(t *testing.T) {
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bad := messaging.DefaultOptions()
	bad.Replicas = -1
	nc, js, closeConn, err := messaging.Connect(ctx, env.Conn, natsconn.Options{}, bad, "svc", slog.Default())
	if err == nil || nc != nil || js != nil || closeConn != nil {
		t.Fatalf("want an error and nothing else, got err=%v", err)
	}
}
