package messaging_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natsconn"
	"github.com/nodesmith/nodesmith/libs/natstest"
)

func TestConnectOwnsOnlyTheConnectionItMakes(t *testing.T) {
	env := natstest.StartIn(t, t.TempDir(), false) // no topology yet: Connect ensures it
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	opts := env.Options(natsauth.Lifecycle, natsconn.Options{})
	opts.Name, opts.InboxPrefix = "", ""
	nc, js, closeConn, err := messaging.Connect(ctx, nil, opts, messaging.DefaultOptions(), messaging.ServiceLifecycle, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if got := nc.Opts.Name; got != "lifecycle" {
		t.Errorf("connection name = %q, want the service name", got)
	}
	if got := nc.Opts.InboxPrefix; got != "_INBOX.lifecycle" {
		t.Errorf("inbox prefix = %q, want the service's", got)
	}
	if _, err := js.KeyValue(ctx, messaging.BucketInstances); err != nil {
		t.Errorf("topology not ensured: %v", err)
	}
	closeConn()
	if !nc.IsClosed() {
		t.Error("close should drain and close a connection Connect made")
	}

	injected, _ := env.ConnectAs(t, natsauth.APIGateway)
	got, _, closeConn, err := messaging.Connect(ctx, injected, natsconn.Options{}, messaging.DefaultOptions(), messaging.ServiceAPIGateway, slog.Default())
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
	nc, js, closeConn, err := messaging.Connect(ctx, env.Conn, natsconn.Options{}, bad, messaging.ServiceLifecycle, slog.Default())
	if err == nil || nc != nil || js != nil || closeConn != nil {
		t.Fatalf("want an error and nothing else, got err=%v", err)
	}
}

// The services other than lifecycle may not create the topology: they wait
// for lifecycle to.
func TestConnectWaitsForLifecycleToCreateTheTopology(t *testing.T) {
	env := natstest.StartIn(t, t.TempDir(), false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type result struct {
		closeConn func()
		err       error
	}
	done := make(chan result, 1)
	go func() {
		_, _, c, err := messaging.Connect(ctx, nil, env.Options(natsauth.CloudAdapter, natsconn.Options{}), messaging.DefaultOptions(), messaging.ServiceCloudAdapter, slog.Default())
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("cloud-adapter connected before the topology existed: %v", r.err)
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := env.JS.Stream(ctx, messaging.CommandStream); err == nil {
		t.Fatal("the waiting service created the command stream")
	}
	if err := messaging.Ensure(ctx, env.JS, messaging.DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.closeConn()
}
