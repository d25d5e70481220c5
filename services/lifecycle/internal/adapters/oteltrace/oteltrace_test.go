package oteltrace_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/tracing/tracingtest"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/memory"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/oteltrace"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// spyCommands records the span context each command was published under.
type spyCommands struct {
	memory.Commands
	mu  sync.Mutex
	got map[string][]trace.SpanContext
}

func (c *spyCommands) saw(kind string, ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.got == nil {
		c.got = map[string][]trace.SpanContext{}
	}
	c.got[kind] = append(c.got[kind], trace.SpanContextFromContext(ctx))
}

func (c *spyCommands) last(kind string) trace.SpanContext {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.got[kind]) == 0 {
		return trace.SpanContext{}
	}
	return c.got[kind][len(c.got[kind])-1]
}

func (c *spyCommands) Create(ctx context.Context, cmd ports.CreateCommand) error {
	c.saw("create", ctx)
	return c.Commands.Create(ctx, cmd)
}

func (c *spyCommands) Terminate(ctx context.Context, cmd ports.TerminateCommand) error {
	c.saw("terminate", ctx)
	return c.Commands.Terminate(ctx, cmd)
}

func span(rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	var found sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			found = s
		}
	}
	return found
}

// An operation's trace reaches the commands the dispatcher publishes later
// for the instances it created or released, through the record.
func TestCommandsContinueTheTraceOfTheOperationThatCausedThem(t *testing.T) {
	tp, rec := tracingtest.Record(t)
	tr := tp.Tracer("test")
	ctx := context.Background()
	cmds := &spyCommands{}
	a := app.New(app.DefaultOptions(), app.Deps{
		Store: memory.NewStore(), Commands: cmds, Clock: memory.NewClock(time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Tracer: oteltrace.Tracer{},
	})
	g := domain.NodeGroup{ID: "g", MaxSize: 5,
		Template: domain.InstanceTemplate{Name: "small", Provider: "tencentcloud", Account: "dev", Region: "r"}}
	if err := a.SetConfig(ctx, []domain.NodeGroup{g}); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}

	opCtx, op := tr.Start(ctx, "increase")
	if _, err := a.IncreaseSize(opCtx, "g", 2); err != nil {
		t.Fatal(err)
	}
	op.End()
	for _, in := range a.Instances("g") {
		if got := in.TraceContext["traceparent"]; got == "" || !strings.Contains(got, op.SpanContext().TraceID().String()) {
			t.Fatalf("instance %s trace context %v, want the operation's trace %s", in.ID, in.TraceContext, op.SpanContext().TraceID())
		}
	}

	a.Pass(ctx) // the dispatcher's context carries no span
	sc := cmds.last("create")
	if sc.TraceID() != op.SpanContext().TraceID() {
		t.Fatalf("create published in trace %s, want the operation's %s", sc.TraceID(), op.SpanContext().TraceID())
	}
	d := span(rec, "dispatch create")
	if d == nil || d.Parent().SpanID() != op.SpanContext().SpanID() {
		t.Fatalf("dispatch create span %v: want a child of the operation span %s", d, op.SpanContext().SpanID())
	}
	if got := d.Attributes(); len(got) == 0 {
		t.Error("dispatch span has no attributes")
	}

	// Drive both to Running (no hooks, no cluster) with untraced results.
	snap := cmds.Snapshot()
	for _, r := range snap.Creates[0].Instances {
		mustEvent(t, a, r.InstanceID, domain.CloudCreated{Attempt: r.Attempt, BatchID: snap.Creates[0].BatchID, CloudID: "ins-" + r.InstanceID})
		// The create command goes on to watch its VMs.
		mustEvent(t, a, r.InstanceID, domain.CloudObserved{Attempt: r.Attempt, State: domain.CloudRunning, PrivateIP: "10.0.0.1"})
	}
	ins := a.Instances("g")
	for _, in := range ins {
		if in.State != domain.StateRunning {
			t.Fatalf("instance %s is %s, want Running", in.ID, in.State)
		}
	}

	// Releasing an instance stamps the releasing operation's trace.
	delCtx, del := tr.Start(ctx, "delete nodes")
	if _, err := a.DeleteNodes(delCtx, "g", []app.NodeRef{{ProviderID: ins[0].ProviderID}}); err != nil {
		t.Fatal(err)
	}
	del.End()
	a.Pass(ctx)
	a.Pass(ctx)
	if sc := cmds.last("terminate"); sc.TraceID() != del.SpanContext().TraceID() {
		t.Fatalf("terminate published in trace %s, want the DeleteNodes trace %s", sc.TraceID(), del.SpanContext().TraceID())
	}
}

func mustEvent(t *testing.T, a *app.App, id string, ev domain.Event) {
	t.Helper()
	if err := a.HandleEvent(context.Background(), id, ev); err != nil {
		t.Fatal(err)
	}
}

func TestStartUsesTheFirstValidParentAndLinksTheOthers(t *testing.T) {
	tp, rec := tracingtest.Record(t)
	tr := tp.Tracer("test")
	var tt oteltrace.Tracer
	ctx := context.Background()
	if c := tt.Carrier(ctx); c != nil {
		t.Fatalf("carrier of a context without a span = %v, want nil", c)
	}
	c1, s1 := tr.Start(ctx, "one")
	c2, s2 := tr.Start(ctx, "two")
	s1.End()
	s2.End()
	p1, p2 := tt.Carrier(c1), tt.Carrier(c2)
	_, sp := tt.Start(ctx, "x", ports.SpanOptions{
		Parents:    []map[string]string{nil, {"traceparent": "garbage"}, p1, p2, p1},
		Attributes: []ports.Attribute{{Key: "k", Value: "v"}, {Key: "n", Value: 3}},
	})
	sp.SetAttributes(ports.Attribute{Key: "b", Value: true})
	sp.End(io.EOF)
	x := span(rec, "x")
	if x == nil {
		t.Fatal("span not recorded")
	}
	if x.Parent().SpanID() != s1.SpanContext().SpanID() || x.SpanContext().TraceID() != s1.SpanContext().TraceID() {
		t.Errorf("parent %v, want span one %v", x.Parent(), s1.SpanContext())
	}
	if len(x.Links()) != 1 || x.Links()[0].SpanContext.SpanID() != s2.SpanContext().SpanID() {
		t.Errorf("links %v, want exactly span two", x.Links())
	}
	if len(x.Attributes()) != 3 {
		t.Errorf("attributes %v, want 3", x.Attributes())
	}
	if x.Status().Description != io.EOF.Error() {
		t.Errorf("status %v, want the error", x.Status())
	}
}

// spyInventory records the span context of inventory requests.
type spyInventory struct {
	memory.Commands
	mu  sync.Mutex
	ctx []trace.SpanContext
}

func (c *spyInventory) ListInventory(ctx context.Context, r ports.InventoryRequest) error {
	c.mu.Lock()
	c.ctx = append(c.ctx, trace.SpanContextFromContext(ctx))
	c.mu.Unlock()
	return c.Commands.ListInventory(ctx, r)
}

// A reconciler pass is one trace: the request span and the comparison of
// the answer, whose context came back through the cloud adapter.
func TestReconcilerPassIsOneSpanPerStep(t *testing.T) {
	_, rec := tracingtest.Record(t)
	ctx := context.Background()
	cmds := &spyInventory{}
	a := app.New(app.DefaultOptions(), app.Deps{
		Store: memory.NewStore(), Commands: cmds, Clock: memory.NewClock(time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Tracer: oteltrace.Tracer{},
	})
	groups := []domain.NodeGroup{
		{ID: "a", MaxSize: 5, Template: domain.InstanceTemplate{Name: "t", Provider: "tencentcloud", Account: "dev", Region: "r1"}},
		{ID: "b", MaxSize: 5, Template: domain.InstanceTemplate{Name: "t", Provider: "tencentcloud", Account: "dev", Region: "r2"}},
	}
	if err := a.SetConfig(ctx, groups); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	a.RequestInventory(ctx)
	req := span(rec, "reconcile: request inventory")
	if req == nil {
		t.Fatal("no request span")
	}
	if len(cmds.ctx) != 2 {
		t.Fatalf("%d inventory requests, want one per region", len(cmds.ctx))
	}
	for _, sc := range cmds.ctx {
		if sc.SpanID() != req.SpanContext().SpanID() {
			t.Errorf("inventory requested under span %s, want the pass's span %s", sc.SpanID(), req.SpanContext().SpanID())
		}
	}
	n := 0
	for _, s := range rec.Ended() {
		if s.Name() == "reconcile: request inventory" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d request spans for one pass, want 1", n)
	}

	// The answer arrives in the same trace (the adapters propagate it).
	inv := cmds.Snapshot().Inventory[0]
	answerCtx := trace.ContextWithRemoteSpanContext(ctx, req.SpanContext())
	if err := a.HandleInventory(answerCtx, app.Inventory{RequestID: inv.RequestID, Target: inv.Target}); err != nil {
		t.Fatal(err)
	}
	cmp := span(rec, "reconcile: compare inventory")
	if cmp == nil || cmp.SpanContext().TraceID() != req.SpanContext().TraceID() {
		t.Fatalf("compare span %v: want it in the pass's trace", cmp)
	}
}
