package service_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/health"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/libs/testwait"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/service"
)

// stack is one embedded NATS server plus an event recorder; replicas of the
// service are started on it with startReplica.
type stack struct {
	t   *testing.T
	env *natstest.Env
	pub *messaging.Publisher

	mu     sync.Mutex
	events []recorded
}

type recorded struct {
	subject string
	msgID   string
	header  nats.Header
	ev      *cloudv1.Event
}

func newStack(t *testing.T) *stack {
	t.Helper()
	s := &stack{t: t, env: natstest.Start(t)}
	s.pub = messaging.NewPublisher(s.env.JS)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The test observes every cloud event as an unrestricted test user:
	// no service may read them but lifecycle's durable consumer.
	_, observer := s.env.ConnectAdmin(t)
	cons, err := observer.OrderedConsumer(ctx, messaging.EventStream, natsjs.OrderedConsumerConfig{
		FilterSubjects: []string{messaging.SubjectCloudEvents + ".>"},
	})
	if err != nil {
		t.Fatalf("event consumer: %v", err)
	}
	cc, err := cons.Consume(func(m natsjs.Msg) {
		var ev cloudv1.Event
		if err := proto.Unmarshal(m.Data(), &ev); err != nil {
			t.Errorf("undecodable event on %s: %v", m.Subject(), err)
			return
		}
		s.mu.Lock()
		s.events = append(s.events, recorded{subject: m.Subject(), msgID: m.Headers().Get("Nats-Msg-Id"), header: m.Headers(), ev: &ev})
		s.mu.Unlock()
	})
	if err != nil {
		t.Fatalf("consuming events: %v", err)
	}
	t.Cleanup(cc.Stop)
	return s
}

func (s *stack) recorded() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.events...)
}

// testConfig is DefaultConfig tuned for quick tests.
func testConfig() service.Config {
	cfg := service.DefaultConfig()
	cfg.HealthAddr = ""
	cfg.Concurrency = 8
	cfg.Heartbeat = time.Second
	cfg.ShutdownGrace = 2 * time.Second
	cfg.WatchPollInterval = 50 * time.Millisecond
	cfg.WatchNotFoundGrace = time.Second
	cfg.RetryInitial = 10 * time.Millisecond
	cfg.RetryMax = 50 * time.Millisecond
	cfg.CallTimeout = 10 * time.Second
	return cfg
}

type replica struct {
	stop   context.CancelFunc
	done   chan error
	health *health.Checks
	// cut closes the replica's NATS socket (startKillableReplica only).
	cut func()
}

// startReplica runs service.Run on its own NATS connection; deps' Health
// and Conn are filled in, and Logger unless the test set one.
func (s *stack) startReplica(name string, cfg service.Config, deps service.Deps) *replica {
	s.t.Helper()
	nc, _ := s.env.ConnectAs(s.t, natsauth.CloudAdapter)
	return s.startReplicaOn(nc, name, cfg, deps)
}

// startKillableReplica is startReplica on a connection that kill cuts
// like a crash would.
func (s *stack) startKillableReplica(name string, cfg service.Config, deps service.Deps) *replica {
	s.t.Helper()
	d := &socketDialer{}
	// No reconnect: a dead process does not come back on its own.
	nc, err := nats.Connect(s.env.Server.ClientURL(), append(s.env.NATSOptions(s.t, natsauth.CloudAdapter), nats.SetCustomDialer(d), nats.NoReconnect())...)
	if err != nil {
		s.t.Fatalf("connecting: %v", err)
	}
	s.t.Cleanup(nc.Close)
	r := s.startReplicaOn(nc, name, cfg, deps)
	r.cut = d.closeAll
	return r
}

// socketDialer dials TCP and keeps the sockets, so a test can close them
// under the NATS client.
type socketDialer struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (d *socketDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err == nil {
		d.mu.Lock()
		d.conns = append(d.conns, c)
		d.mu.Unlock()
	}
	return c, err
}

func (d *socketDialer) closeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		_ = c.Close()
	}
}

// kill ends a replica from startKillableReplica as close to a crash as a
// test process allows: its NATS socket is closed first, so the server
// sees the client vanish and nothing the replica does afterwards (ack,
// nak, a result event) reaches NATS; then its goroutines are stopped. Its
// commands in flight are left to the consumer's ack wait.
func (r *replica) kill(t *testing.T) {
	t.Helper()
	r.cut()
	r.stop()
	select {
	case err := <-r.done:
		// A replica that lost NATS may end with an error: not the point.
		t.Logf("killed replica's Run returned %v", err)
		close(r.done)
	case <-time.After(30 * time.Second):
		t.Error("killed replica's Run did not return within 30s")
	}
}

func (s *stack) startReplicaOn(nc *nats.Conn, name string, cfg service.Config, deps service.Deps) *replica {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{stop: cancel, done: make(chan error, 1), health: &health.Checks{}}
	logger := deps.Logger
	switch {
	case logger != nil:
	case os.Getenv("CLOUD_ADAPTER_TEST_LOGS") != "":
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("replica", name)
	default:
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	go func() {
		deps.Logger, deps.Health, deps.Conn = logger, r.health, nc
		if deps.Environ == nil {
			deps.Environ = []string{}
		}
		r.done <- service.Run(ctx, cfg, deps)
	}()
	s.t.Cleanup(func() { r.shutdown(s.t) })
	return r
}

// shutdown stops the replica and waits for Run to return.
func (r *replica) shutdown(t *testing.T) {
	t.Helper()
	r.stop()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("service.Run returned %v", err)
		}
		if ok {
			close(r.done)
		}
	case <-time.After(30 * time.Second):
		t.Error("service.Run did not return within 30s of its context ending")
	}
}

func (r *replica) waitReady(t *testing.T) {
	t.Helper()
	eventually(t, 20*time.Second, "replica ready", func() bool {
		return len(r.health.Run(context.Background())) == 0
	})
}

func (s *stack) publish(subject, msgID string, cmd *cloudv1.Command) {
	s.t.Helper()
	s.publishCtx(context.Background(), subject, msgID, cmd)
}

// publishCtx publishes with ctx's trace context in the headers.
func (s *stack) publishCtx(ctx context.Context, subject, msgID string, cmd *cloudv1.Command) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.pub.Publish(ctx, subject, msgID, cmd); err != nil {
		s.t.Fatalf("publishing command: %v", err)
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, within, what, cond)
}

func createCommand(provider, batch string, n int) *cloudv1.Command {
	refs := make([]*cloudv1.InstanceRef, n)
	for i := range refs {
		refs[i] = &cloudv1.InstanceRef{InstanceId: fmt.Sprintf("%s-i%d", batch, i), Attempt: 1, Group: "g1"}
	}
	return &cloudv1.Command{Body: &cloudv1.Command_Create{Create: &cloudv1.CreateInstances{
		BatchId: batch, ClientToken: "tok-" + batch, TemplateName: "small",
		Target:         &cloudv1.Target{Provider: provider, Account: "acct", Region: "ap-guangzhou"},
		ParametersJson: `{"InstanceType":"S5.MEDIUM4","ImageId":"img-test","Placement":{"Zone":"ap-guangzhou-3"}}`,
		Instances:      refs, ClusterId: "c1", Group: "g1",
	}}}
}

// createdMapping returns instance id -> cloud ids seen in created events,
// and the number of created events.
func (s *stack) createdMapping() (map[string]map[string]bool, int) {
	out := map[string]map[string]bool{}
	n := 0
	for _, r := range s.recorded() {
		c := r.ev.GetCreated()
		if c == nil {
			continue
		}
		n++
		for _, ref := range c.GetInstances() {
			if out[ref.GetInstanceId()] == nil {
				out[ref.GetInstanceId()] = map[string]bool{}
			}
			out[ref.GetInstanceId()][ref.GetCloudId()] = true
		}
	}
	return out, n
}
