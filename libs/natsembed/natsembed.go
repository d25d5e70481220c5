// Package natsembed runs a NATS server with JetStream inside the current
// process, for the embedded stack (`make run`) and for tests. It is the real
// nats-server, not a fake, and like production it admits only the NKey
// users it is given (libs/natsauth's identities and permissions): no
// anonymous connection.
package natsembed

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configure the embedded server.
type Options struct {
	// Host and Port to listen on; Port -1 picks a free port.
	Host string
	Port int
	// StoreDir holds JetStream file storage; state survives a restart as long
	// as the directory is kept. Required: callers decide where state lives.
	StoreDir string
	// ServerName identifies the server in logs and JetStream metadata.
	ServerName string
	// Logs enables the server's own logs on stderr.
	Logs bool
	// Users are the NKey users admitted, with their permissions
	// (natsauth.ServerUsers). Required: there is no anonymous access.
	Users []*server.NkeyUser
	// SyncInterval is how often JetStream syncs its files to disk and
	// compacts blocks that removed messages left mostly empty; zero means
	// the server's default (2 minutes). Benchmarks shorten it to see the
	// store as it settles.
	SyncInterval time.Duration
}

// Server is a running embedded NATS server.
type Server struct {
	ns *server.Server
}

// Start starts the server and waits until it accepts connections.
func Start(o Options) (*Server, error) {
	if o.StoreDir == "" {
		return nil, errors.New("natsembed: StoreDir is required")
	}
	if len(o.Users) == 0 {
		return nil, errors.New("natsembed: Users are required (no anonymous access)")
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.ServerName == "" {
		o.ServerName = "nodesmith-embedded"
	}
	ns, err := server.NewServer(&server.Options{
		ServerName: o.ServerName,
		Host:       o.Host,
		Port:       o.Port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true,
		// Bounded so a runaway test cannot fill the disk.
		JetStreamMaxStore:  8 << 30,
		JetStreamMaxMemory: 1 << 30,
		MaxPayload:         8 << 20,
		Nkeys:              o.Users,
		SyncInterval:       o.SyncInterval,
	})
	if err != nil {
		return nil, fmt.Errorf("configuring embedded nats: %w", err)
	}
	if o.Logs {
		ns.ConfigureLogger()
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("embedded nats not ready after 30s")
	}
	return &Server{ns: ns}, nil
}

// ClientURL is the URL clients connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// Shutdown stops the server and waits for it to finish, flushing JetStream
// state to disk.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}
