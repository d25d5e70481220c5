// Package natstest starts a real embedded NATS JetStream server for a test,
// with nodesmith's identities (libs/natsauth: fresh NKeys, the production
// permissions) and topology in place, and tears it down with the test.
package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natsconn"
	"github.com/nodesmith/nodesmith/libs/natsembed"
)

// Env is a running server and a client connection to it.
type Env struct {
	Server *natsembed.Server
	// Conn and JS are connected as the bootstrap identity, lifecycle.
	Conn *nats.Conn
	JS   jetstream.JetStream
	// Keys are every identity's NKeys (fresh for this server).
	Keys *natsauth.Keys
	// StoreDir is where JetStream keeps its files (for restart tests).
	StoreDir string
	// admin is the seed of the test-only unrestricted user (ConnectAdmin).
	admin *natsauth.Admin
}

// Start runs a server with its store in t.TempDir(), connects as lifecycle,
// and ensures the topology with messaging.DefaultOptions.
func Start(t testing.TB) *Env {
	t.Helper()
	return StartIn(t, t.TempDir(), true)
}

// StartIn runs a server on storeDir. With topology it also ensures
// nodesmith's streams, consumers and buckets.
func StartIn(t testing.TB, storeDir string, topology bool) *Env {
	t.Helper()
	keys, err := natsauth.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	return StartWith(t, storeDir, keys, topology)
}

// StartWith runs a server on storeDir admitting keys (a restart test
// reuses the first server's). With topology it also ensures the topology.
func StartWith(t testing.TB, storeDir string, keys *natsauth.Keys, topology bool) *Env {
	t.Helper()
	users, err := natsauth.ServerUsers(keys.PublicKeys())
	if err != nil {
		t.Fatal(err)
	}
	// The test-only observer: no service identity, no restriction.
	admin, err := natsauth.NewAdmin()
	if err != nil {
		t.Fatal(err)
	}
	users = append(users, admin.User)
	srv, err := natsembed.Start(natsembed.Options{Port: -1, StoreDir: storeDir, Users: users})
	if err != nil {
		t.Fatalf("starting embedded nats: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	e := &Env{Server: srv, Keys: keys, StoreDir: storeDir, admin: admin}
	e.Conn, e.JS = e.ConnectAs(t, natsauth.Bootstrap)
	if topology {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := messaging.Ensure(ctx, e.JS, messaging.DefaultOptions()); err != nil {
			t.Fatalf("ensuring topology: %v", err)
		}
	}
	return e
}

// Connect opens another client connection as the bootstrap identity,
// lifecycle (e.g. a second lifecycle process).
func (e *Env) Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return e.ConnectAs(t, natsauth.Bootstrap)
}

// ConnectAs opens a client connection as id, with its inbox prefix; extra
// options are appended. It is closed with the test.
func (e *Env) ConnectAs(t testing.TB, id natsauth.Identity, extra ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return Dial(t, e.Server.ClientURL(), append(e.NATSOptions(t, id), extra...)...)
}

// ConnectAdmin opens a connection as a test-only user without
// restrictions, which the production configuration does not have: for test
// scaffolding that plays no service (observing every event, making a
// private stream). Code under test connects as its identity instead.
func (e *Env) ConnectAdmin(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	opts, err := e.admin.NATSOptions()
	if err != nil {
		t.Fatal(err)
	}
	return Dial(t, e.Server.ClientURL(), opts...)
}

// NATSOptions are the nats.go options that authenticate as id (its NKey
// and inbox prefix), for tests that dial themselves.
func (e *Env) NATSOptions(t testing.TB, id natsauth.Identity) []nats.Option {
	t.Helper()
	return append(e.Keys.NATSOptions(id), nats.Name(string(id)))
}

// Options are a service's natsconn options (--nats-*) for this server as
// id, with o's other fields kept (Name, timeouts).
func (e *Env) Options(id natsauth.Identity, o natsconn.Options) natsconn.Options {
	o.URL = e.Server.ClientURL()
	return e.Keys.ConnOptions(id, o)
}

// StartPlain runs a JetStream server without nodesmith's identities and
// connects to it: for generic code (libs/worker) and tests of JetStream
// mechanics (advisories, private streams) that no identity may perform.
// Code that plays a service uses Start and its identity instead.
func StartPlain(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	ns := RunServer(t, &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, JetStream: true, StoreDir: t.TempDir()})
	return Dial(t, ns.ClientURL())
}

// RunServer starts a nats-server configured by opts, waits until it
// accepts connections, and shuts it down with the test: for tests that
// need a server natsembed does not make (no JetStream yet, a production
// configuration file).
func RunServer(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("configuring nats-server: %v", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		t.Fatal("nats-server not accepting connections after 30s")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

// Dial connects to url with opts and opens JetStream on the connection,
// which is closed with the test.
func Dial(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}
