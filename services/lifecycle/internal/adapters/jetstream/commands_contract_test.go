package jetstream_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/libs/testwait"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	hookv1 "github.com/nodesmith/nodesmith/proto/nodesmith/hook/v1"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/commandstest"
	jsadapter "github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/jetstream"
)

// The ports.Commands contract on a real JetStream server with nodesmith's
// accounts and topology (one server for the suite): lifecycle publishes
// as itself, the workers drain the queue as cloud-adapter and hook-runner
// from their durable consumers, and the queue is read by a test-only
// observer.
func TestCommandsContract(t *testing.T) {
	env := natstest.Start(t)
	_, admin := env.ConnectAdmin(t)
	workers := map[string]jetstream.JetStream{}
	_, workers[messaging.ConsumerCloudAdapter] = env.ConnectAs(t, natsauth.CloudAdapter)
	_, workers[messaging.ConsumerHookRunner] = env.ConnectAs(t, natsauth.HookRunner)
	ensure := func(t *testing.T, maxMsgs int64) {
		t.Helper()
		o := messaging.DefaultOptions()
		if maxMsgs > 0 {
			o.CommandMaxMsgs = maxMsgs
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := messaging.Ensure(ctx, env.JS, o); err != nil {
			t.Fatal(err)
		}
	}
	// drain fetches without waiting (FetchNoWait): a pull that expires
	// while a message is on its way leaves that message delivered and
	// unacknowledged until AckWait, which would stall the drain. Should a
	// message still be missed (a no-wait pull that raced its delivery),
	// the drain goes on until the stream is empty: at worst the message
	// comes back after the consumer's AckWait.
	var drainOnce func(ctx context.Context, t *testing.T)
	drain := func(t *testing.T) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		testwait.Until(t, 80*time.Second, "the workers to drain the command stream", func() bool {
			drainOnce(ctx, t)
			return len(queued(t, admin)) == 0
		})
	}
	drainOnce = func(ctx context.Context, t *testing.T) {
		t.Helper()
		for name, js := range workers {
			cons, err := js.Consumer(ctx, messaging.CommandStream, name)
			if err != nil {
				t.Fatal(err)
			}
			for {
				batch, err := cons.FetchNoWait(100)
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for m := range batch.Messages() {
					n++
					if err := m.DoubleAck(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
					t.Fatal(err)
				}
				if n == 0 {
					break
				}
			}
		}
	}
	commandstest.Run(t, func(t *testing.T) commandstest.Harness {
		ensure(t, 0)
		drain(t)
		return commandstest.Harness{
			Commands: jsadapter.NewCommands(jsadapter.MessagingPublisher{P: messaging.NewPublisher(env.JS)}),
			Queued:   func(t *testing.T) []commandstest.Stored { return queued(t, admin) },
			Limit:    func(t *testing.T, n int) { ensure(t, int64(n)) },
			Drain:    drain,
		}
	})
}

// queued reads every message the command stream holds, oldest first.
func queued(t *testing.T, admin jetstream.JetStream) []commandstest.Stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := admin.Stream(ctx, messaging.CommandStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []commandstest.Stored
	if info.State.Msgs == 0 {
		return nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // acknowledged by a worker
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, reduceWire(t, m.Subject, m.Data))
	}
	return out
}

// reduceWire maps a command as stored to what the contract compares.
func reduceWire(t *testing.T, subject string, data []byte) commandstest.Stored {
	t.Helper()
	ids := func(rs []*cloudv1.InstanceRef) string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = r.GetInstanceId()
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	if subject == messaging.SubjectHookRun {
		var h hookv1.RunHook
		if err := proto.Unmarshal(data, &h); err != nil {
			t.Fatal(err)
		}
		return commandstest.Stored{Kind: "hook", Key: h.GetInstanceId(), Attempt: h.GetAttempt(), Mark: h.GetScript()}
	}
	var c cloudv1.Command
	if err := proto.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	switch subject {
	case messaging.SubjectCloudCreate:
		cr := c.GetCreate()
		var attempt uint32
		for _, r := range cr.GetInstances() {
			attempt = max(attempt, r.GetAttempt())
		}
		return commandstest.Stored{Kind: "create", Key: cr.GetBatchId(), Attempt: attempt, Mark: cr.GetClientToken()}
	case messaging.SubjectCloudWatch:
		w := c.GetWatch()
		return commandstest.Stored{Kind: "watch", Key: ids(w.GetInstances()), Mark: w.GetTarget().GetRegion()}
	case messaging.SubjectCloudTerminate:
		x := c.GetTerminate()
		return commandstest.Stored{Kind: "terminate", Key: ids(x.GetInstances()), Mark: x.GetClusterId()}
	case messaging.SubjectCloudInventory:
		x := c.GetListInventory()
		return commandstest.Stored{Kind: "inventory", Key: x.GetRequestId(), Mark: x.GetClusterId()}
	case messaging.SubjectCloudTag:
		x := c.GetTag()
		return commandstest.Stored{Kind: "tag", Key: x.GetRequestId(), Mark: x.GetClusterId()}
	}
	t.Fatalf("a command on unexpected subject %s", subject)
	return commandstest.Stored{}
}
