package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natsembed"
)

// Bus is a standalone embedded NATS server with nodesmith's identities
// (fresh NKeys) and its topology, and a connection as lifecycle, the
// bootstrap identity (seeding, reading state).
type Bus struct {
	Server *natsembed.Server
	Keys   *natsauth.Keys
	Conn   *nats.Conn
	JS     jetstream.JetStream
}

// StartBus starts the server on storeDir and ensures the topology.
func StartBus(ctx context.Context, storeDir string) (*Bus, error) {
	return StartBusSync(ctx, storeDir, 0)
}

// StartBusSync is StartBus with JetStream syncing (and compacting) its
// files every sync rather than the server's default 2 minutes.
func StartBusSync(ctx context.Context, storeDir string, sync time.Duration) (*Bus, error) {
	keys, err := natsauth.GenerateKeys()
	if err != nil {
		return nil, err
	}
	users, err := keys.ServerUsers()
	if err != nil {
		return nil, err
	}
	ns, err := natsembed.Start(natsembed.Options{Port: -1, StoreDir: storeDir, Users: users, SyncInterval: sync})
	if err != nil {
		return nil, err
	}
	b := &Bus{Server: ns, Keys: keys}
	if b.Conn, err = nats.Connect(ns.ClientURL(), keys.NATSOptions(natsauth.Lifecycle)...); err != nil {
		ns.Shutdown()
		return nil, err
	}
	if b.JS, err = jetstream.New(b.Conn); err == nil {
		err = messaging.Ensure(ctx, b.JS, messaging.DefaultOptions())
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Close closes the connection and stops the server.
func (b *Bus) Close() {
	b.Conn.Close()
	b.Server.Shutdown()
}

// ServiceArgs are the --nats-* flags of a service process connecting as
// id: the URL and a seed file written under dir.
func (b *Bus) ServiceArgs(dir string, id natsauth.Identity) ([]string, error) {
	return natsArgs(b.Server.ClientURL(), b.Keys, dir, id)
}

// ServiceArgs are the --nats-* flags of a service process named name
// ("cloud-adapter-1": its identity is the name's service) connecting to
// the world's NATS, its seed written under the world's directory.
func (w *World) ServiceArgs(name string) ([]string, error) {
	id, ok := IdentityOf(name)
	if !ok {
		return nil, fmt.Errorf("no NATS identity for %q", name)
	}
	return natsArgs(w.NATSURL(), w.NATSKeys, filepath.Join(w.cfg.Dir, "keys"), id)
}

// IdentityOf is the NATS identity of a replica named "<service>[-N]".
func IdentityOf(name string) (natsauth.Identity, bool) {
	for _, id := range natsauth.All() {
		if name == string(id) || strings.HasPrefix(name, string(id)+"-") {
			return id, true
		}
	}
	return "", false
}

func natsArgs(url string, keys *natsauth.Keys, dir string, id natsauth.Identity) ([]string, error) {
	seed := filepath.Join(dir, "nats-"+string(id)+".nk")
	if err := keys.WriteSeed(seed, id); err != nil {
		return nil, err
	}
	return []string{"--nats-url", url, "--nats-nkey-file", seed}, nil
}
