package natsreq_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/natsreq"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/fakelifecycle"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/ports"
)

var increase = ports.Request{Op: ports.IncreaseSize{Group: "g", Delta: 1}}

// signalHandler signals on the first log record whose message is msg.
type signalHandler struct {
	msg  string
	once sync.Once
	ch   chan struct{}
}

func (h *signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *signalHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.ch) })
	}
	return nil
}
func (h *signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *signalHandler) WithGroup(string) slog.Handler      { return h }

func reply(t *testing.T, m *nats.Msg, r *lifecyclev1.Reply) {
	t.Helper()
	b, _ := proto.Marshal(r)
	if err := m.Respond(b); err != nil {
		t.Errorf("respond: %v", err)
	}
}

func TestRetriesUntilALeaderSubscribes(t *testing.T) {
	env := natstest.Start(t)
	retrying := &signalHandler{msg: "lifecycle request not answered, retrying", ch: make(chan struct{})}
	c := natsreq.New(gatewayConn(t, env), natsreq.Options{Logger: slog.New(retrying)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	type result struct {
		groups uint64
		err    error
	}
	done := make(chan result, 1)
	go func() {
		revs, err := c.Do(ctx, increase)
		done <- result{revs.Groups, err}
	}()
	<-retrying.ch // the first attempt found no responders

	leader, _ := env.Connect(t)
	if _, err := leader.Subscribe(messaging.SubjectLifecycleOps, func(m *nats.Msg) {
		reply(t, m, &lifecyclev1.Reply{GroupsRevision: 42, InstancesRevision: 7})
	}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.groups != 42 {
		t.Fatalf("Do = %v, %v; want revision 42", r.groups, r.err)
	}
}

// With no leader every attempt finds no responders, so nothing can have
// been applied: the caller's deadline ends the wait for the next attempt,
// and the answer is Unavailable. (An attempt the deadline cuts in flight
// is a different case: its outcome is unknown, see the conformance test.)
// The long backoff puts the deadline in that wait, whatever the load.
func TestNoLeaderIsUnavailable(t *testing.T) {
	env := natstest.Start(t)
	c := natsreq.New(gatewayConn(t, env), natsreq.Options{MinBackoff: time.Minute, MaxBackoff: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Do(ctx, increase)
	if domain.CodeOf(err) != contract.CodeUnavailable {
		t.Fatalf("err = %v, want unavailable", err)
	}
}

func TestReplyErrorsBecomeCodes(t *testing.T) {
	env := natstest.Start(t)
	leader, _ := env.Connect(t)
	var next atomic.Value
	if _, err := leader.Subscribe(messaging.SubjectLifecycleOps, func(m *nats.Msg) {
		if raw := next.Load().([]byte); raw != nil {
			_ = m.Respond(raw)
			return
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := leader.Flush(); err != nil {
		t.Fatal(err)
	}
	c := natsreq.New(gatewayConn(t, env), natsreq.Options{})
	enc := func(r *lifecyclev1.Reply) []byte { b, _ := proto.Marshal(r); return b }
	tests := []struct {
		name string
		raw  []byte
		code domain.Code
		msg  string
	}{
		{"rejection", enc(&lifecyclev1.Reply{Error: &lifecyclev1.Status{Code: int32(codes.FailedPrecondition), Message: "max size reached"}}), contract.CodeFailedPrecondition, "max size reached"},
		{"error without code", enc(&lifecyclev1.Reply{Error: &lifecyclev1.Status{Message: "odd"}}), contract.CodeInternal, "odd"},
		{"out of range code", enc(&lifecyclev1.Reply{Error: &lifecyclev1.Status{Code: 999}}), contract.CodeInternal, ""},
		{"garbage", []byte{0xff, 0xff}, contract.CodeInternal, ""},
		{"success", enc(&lifecyclev1.Reply{InstancesRevision: 9}), contract.CodeOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next.Store(tt.raw)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			revs, err := c.Do(ctx, increase)
			if domain.CodeOf(err) != tt.code {
				t.Fatalf("err = %v, want %v", err, tt.code)
			}
			if tt.msg != "" && domain.MessageOf(err) != tt.msg {
				t.Errorf("message = %q, want %q", domain.MessageOf(err), tt.msg)
			}
			if tt.code == contract.CodeOK && revs.Instances != 9 {
				t.Errorf("revisions = %+v", revs)
			}
		})
	}
}

// A leader that received a request, applied it and went quiet: the retry
// carries the same request id, so a lifecycle that deduplicates by id
// answers it with the first outcome and the group grows once. Every
// operation is retried like this, IncreaseSize and DecreaseTargetSize
// included.
func TestUnansweredAttemptIsRetriedAndAppliedOnce(t *testing.T) {
	tests := []struct {
		name string
		// req is sent to a group "g" (min 0, max 10, target 2, with two
		// PENDING instances); wantTarget is the target after it.
		req        ports.Request
		wantTarget int32
	}{
		{"increase size", ports.Request{Op: ports.IncreaseSize{Group: "g", Delta: 3}}, 5},
		{"decrease target size", ports.Request{Op: ports.DecreaseTargetSize{Group: "g", Delta: -1}}, 1},
		{"set target size", ports.Request{Op: ports.SetTargetSize{Group: "g", TargetSize: 4}}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := natstest.Start(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			leaderConn, leaderJS := env.Connect(t)
			lc, err := fakelifecycle.Start(ctx, leaderConn, leaderJS)
			if err != nil {
				t.Fatal(err)
			}
			defer lc.Stop()
			if _, err := lc.PutGroup(ctx, &statev1.NodeGroup{Id: "g", MinSize: 0, MaxSize: 10, TargetSize: 2}); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"i-a", "i-b"} {
				if _, err := lc.PutInstance(ctx, &statev1.Instance{Id: id, Group: "g", State: statev1.InstanceState_INSTANCE_STATE_PENDING}); err != nil {
					t.Fatal(err)
				}
			}
			lc.DropNextReplies(1) // the first attempt is applied, its answer lost

			c := natsreq.New(gatewayConn(t, env), natsreq.Options{AttemptTimeout: 200 * time.Millisecond})
			revs, err := c.Do(ctx, tt.req)
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if revs.Groups == 0 {
				t.Errorf("revisions = %+v, want the first attempt's writes", revs)
			}
			reqs := lc.Requests()
			if len(reqs) != 2 {
				t.Fatalf("lifecycle received %d attempts, want 2", len(reqs))
			}
			if id := reqs[0].GetRequestId(); id == "" || reqs[1].GetRequestId() != id {
				t.Fatalf("request ids over attempts = %q, %q; want two equal non-empty ids", id, reqs[1].GetRequestId())
			}
			if n := lc.Applied(); n != 1 {
				t.Fatalf("applied %d times, want once", n)
			}
			e, err := leaderJS.KeyValue(ctx, messaging.BucketGroups)
			if err != nil {
				t.Fatal(err)
			}
			entry, err := e.Get(ctx, "g")
			if err != nil {
				t.Fatal(err)
			}
			var g statev1.NodeGroup
			if err := proto.Unmarshal(entry.Value(), &g); err != nil {
				t.Fatal(err)
			}
			if g.GetTargetSize() != tt.wantTarget {
				t.Fatalf("target size = %d, want %d (applied exactly once)", g.GetTargetSize(), tt.wantTarget)
			}
			if entry.Revision() != revs.Groups {
				t.Errorf("group at revision %d, Do reported %d", entry.Revision(), revs.Groups)
			}
		})
	}
}

// A request id set by the caller is kept; the old header is gone.
func TestRequestIDTravelsInTheRequest(t *testing.T) {
	env := natstest.Start(t)
	leader, _ := env.Connect(t)
	got := make(chan *nats.Msg, 1)
	if _, err := leader.Subscribe(messaging.SubjectLifecycleOps, func(m *nats.Msg) {
		got <- m
		reply(t, m, &lifecyclev1.Reply{GroupsRevision: 1})
	}); err != nil {
		t.Fatal(err)
	}
	if err := leader.Flush(); err != nil {
		t.Fatal(err)
	}
	c := natsreq.New(gatewayConn(t, env), natsreq.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := increase
	req.ID = "req-123"
	if _, err := c.Do(ctx, req); err != nil {
		t.Fatal(err)
	}
	m := <-got
	var sent lifecyclev1.Request
	if err := proto.Unmarshal(m.Data, &sent); err != nil {
		t.Fatal(err)
	}
	if sent.GetRequestId() != "req-123" {
		t.Errorf("request_id = %q, want the caller's", sent.GetRequestId())
	}
	if v := m.Header.Get("Nodesmith-Request-Id"); v != "" {
		t.Errorf("the request id still travels in a header too: %q", v)
	}
}

// gatewayConn connects as the api-gateway, the identity that requests ops.
func gatewayConn(t *testing.T, env *natstest.Env) *nats.Conn {
	t.Helper()
	nc, _ := env.ConnectAs(t, natsauth.APIGateway)
	return nc
}
