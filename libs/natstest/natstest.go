// Package natstest starts a real embedded NATS JetStream server for a test,
// with nodesmith's topology in place, and tears it down with the test.
package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsembed"
)

// Env is a running server and a client connection to it.
type Env struct {
	Server *natsembed.Server
	Conn   *nats.Conn
	JS     jetstream.JetStream
	// StoreDir is where JetStream keeps its files (for restart tests).
	StoreDir string
}

// Start runs a server with its store in t.TempDir(), connects, and ensures
// the topology with messaging.DefaultOptions.
func Start(t testing.TB) *Env {
	t.Helper()
	return StartIn(t, t.TempDir(), true)
}

// StartIn runs a server on storeDir. With topology it also ensures
// nodesmith's streams, consumers and buckets.
func StartIn(t testing.TB, storeDir string, topology bool) *Env {
	t.Helper()
	srv, err := natsembed.Start(natsembed.Options{Port: -1, StoreDir: storeDir})
	if err != nil {
		t.Fatalf("starting embedded nats: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatalf("connecting to embedded nats: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	if topology {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := messaging.Ensure(ctx, js, messaging.DefaultOptions()); err != nil {
			t.Fatalf("ensuring topology: %v", err)
		}
	}
	return &Env{Server: srv, Conn: nc, JS: js, StoreDir: storeDir}
}

// Connect opens another client connection (e.g. one per simulated service).
func (e *Env) Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(e.Server.ClientURL())
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}
