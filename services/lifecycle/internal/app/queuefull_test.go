package app_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/libs/sealed"
	jsadapter "github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/jetstream"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/memory"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// A full command queue pauses the outbox: the refused command and the rest
// of the pass stay in flight and are published at a later pass.
func TestFullCommandQueuePausesPublishing(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("a", 0, 10, 0), group("b", 0, 10, 0)})
	h.ok(h.app.IncreaseSize(h.ctx, "a", 1))
	h.ok(h.app.IncreaseSize(h.ctx, "b", 1))
	h.cmds.FailNext(fmt.Errorf("publishing: %w", ports.ErrCommandQueueFull))
	h.app.Pass(h.ctx)
	if n := len(h.cmds.Snapshot().Creates); n != 0 {
		t.Fatalf("%d creates published after the queue refused the first: the pass should pause", n)
	}
	h.app.Pass(h.ctx)
	if n := len(h.cmds.Snapshot().Creates); n != 2 {
		t.Fatalf("creates published once the queue has room: %d, want 2", n)
	}
}

// Against a real command stream with a tiny limit: lifecycle publishes
// what fits, the stream refuses the rest without losing what it holds, and
// every command is delivered once the workers drain the stream.
func TestFullCommandStreamHoldsCommandsBackUntilDrained(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NATS")
	}
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := messaging.DefaultOptions()
	o.CommandMaxMsgs = 2
	if err := messaging.Ensure(ctx, env.JS, o); err != nil {
		t.Fatal(err)
	}
	opts := app.DefaultOptions()
	opts.ReconcileInterval = 0
	opts.CreateLinger = 0
	a := app.New(opts, app.Deps{
		Store:    memory.NewStore(),
		Commands: jsadapter.NewCommands(jsadapter.MessagingPublisher{P: messaging.NewPublisher(env.JS)}),
		Clock:    memory.NewClock(t0),
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	const groups = 5 // one create command each
	var gs []domain.NodeGroup
	for i := range groups {
		gs = append(gs, group(fmt.Sprintf("g%d", i), 0, 10, 0))
	}
	if err := a.SetConfig(ctx, gs); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	for _, g := range gs {
		if _, err := a.IncreaseSize(ctx, g.ID, 1); err != nil {
			t.Fatal(err)
		}
	}

	_, cajs := env.ConnectAs(t, natsauth.CloudAdapter) // the worker pulls
	cons, err := cajs.Consumer(ctx, messaging.CommandStream, messaging.ConsumerCloudAdapter)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := env.JS.Stream(ctx, messaging.CommandStream)
	if err != nil {
		t.Fatal(err)
	}
	delivered := map[string]int{}
	pass := 0
	for ; len(delivered) < groups; pass++ {
		if pass > 10 {
			t.Fatalf("after %d passes only %d of %d creates were delivered: %v", pass, len(delivered), groups, delivered)
		}
		a.Pass(ctx)
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs > 2 {
			t.Fatalf("the stream holds %d commands, beyond its limit of 2", info.State.Msgs)
		}
		// The worker takes what is queued (work-queue retention frees the
		// stream as it acks).
		batch, err := cons.FetchNoWait(10)
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			delivered[m.Headers().Get(jetstream.MsgIDHeader)]++
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			t.Fatal(err)
		}
	}
	if pass < 3 {
		t.Errorf("every create went out within %d passes: the stream never refused one", pass)
	}
	for id, n := range delivered {
		if n != 1 {
			t.Errorf("command %s delivered %d times", id, n)
		}
	}
}

// A hook command names the operator's env entries (template and hook env)
// for the runner to redact from output; the standard variables, which win
// over an operator's entry of the same name, are not redacted.
func TestHookCommandNamesTheOperatorsEnvForRedaction(t *testing.T) {
	g := group("g", 0, 10, 0)
	g.Template.HookEnv = map[string]string{"API_SERVER": "10.0.0.1:6443", "NODE_IP": "overridden"}
	g.Hooks.AfterCreated.Env = map[string]string{"JOIN_TOKEN": "abcdef.0123456789abcdef"}
	key := ringOf(t, 0xC)
	h := newHarness(t, []domain.NodeGroup{g}, withSealer(key))
	h.ok(h.app.IncreaseSize(h.ctx, "g", 1))
	h.settle()
	hooks := h.cmds.Snapshot().Hooks
	if len(hooks) == 0 {
		t.Fatal("no hook command published")
	}
	hc := hooks[0]
	if got := fmt.Sprint(hc.RedactedEnv); got != "[API_SERVER JOIN_TOKEN]" {
		t.Errorf("redacted env = %s, want [API_SERVER JOIN_TOKEN]", got)
	}
	// The operator's values travel sealed (only the hook runner opens them).
	if v, err := key.OpenString(sealed.PurposeHookEnv, "JOIN_TOKEN", hc.Env["JOIN_TOKEN"]); err != nil || v != "abcdef.0123456789abcdef" || hc.Env["NODE_IP"] == "overridden" {
		t.Errorf("env = %v (%v)", hc.Env, err)
	}
}
