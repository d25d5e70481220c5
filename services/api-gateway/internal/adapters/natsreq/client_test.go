package natsreq_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natstest"
	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/natsreq"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

var (
	increase = &lifecyclev1.Request{Op: &lifecyclev1.Request_IncreaseSize{IncreaseSize: &lifecyclev1.IncreaseSize{Group: "g", Delta: 1}}}
	setSize  = &lifecyclev1.Request{Op: &lifecyclev1.Request_SetTargetSize{SetTargetSize: &lifecyclev1.SetTargetSize{Group: "g", TargetSize: 3}}}
)

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
	c := natsreq.New(env.Conn, natsreq.Options{Logger: slog.New(retrying)})
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

func TestNoLeaderIsUnavailable(t *testing.T) {
	env := natstest.Start(t)
	c := natsreq.New(env.Conn, natsreq.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c.Do(ctx, increase)
	if domain.CodeOf(err) != domain.CodeUnavailable {
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
	c := natsreq.New(env.Conn, natsreq.Options{})
	enc := func(r *lifecyclev1.Reply) []byte { b, _ := proto.Marshal(r); return b }
	tests := []struct {
		name string
		raw  []byte
		code domain.Code
		msg  string
	}{
		{"rejection", enc(&lifecyclev1.Reply{Error: &lifecyclev1.Status{Code: int32(codes.FailedPrecondition), Message: "max size reached"}}), domain.CodeFailedPrecondition, "max size reached"},
		{"error without code", enc(&lifecyclev1.Reply{Error: &lifecyclev1.Status{Message: "odd"}}), domain.CodeInternal, "odd"},
		{"out of range code", enc(&lifecyclev1.Reply{Error: &lifecyclev1.Status{Code: 999}}), domain.CodeInternal, ""},
		{"garbage", []byte{0xff, 0xff}, domain.CodeInternal, ""},
		{"success", enc(&lifecyclev1.Reply{InstancesRevision: 9}), domain.CodeOK, ""},
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
			if tt.code == domain.CodeOK && revs.Instances != 9 {
				t.Errorf("revisions = %+v", revs)
			}
		})
	}
}

// A leader that received a request and went quiet may have applied it:
// an IncreaseSize is never sent twice, and the outcome is "unknown".
func TestUnansweredNonIdempotentOpIsSentOnce(t *testing.T) {
	env := natstest.Start(t)
	leader, _ := env.Connect(t)
	var deliveries atomic.Int32
	if _, err := leader.Subscribe(messaging.SubjectLifecycleOps, func(*nats.Msg) { deliveries.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := leader.Flush(); err != nil {
		t.Fatal(err)
	}
	c := natsreq.New(env.Conn, natsreq.Options{AttemptTimeout: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	_, err := c.Do(ctx, increase)
	if domain.CodeOf(err) != domain.CodeDeadlineExceeded {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	if n := deliveries.Load(); n != 1 {
		t.Fatalf("IncreaseSize delivered %d times, want 1", n)
	}
}

// A retry-safe operation bypasses a leader that went quiet, with the same
// request id on every attempt.
func TestRetrySafeOpIsRetriedAfterAnUnansweredAttempt(t *testing.T) {
	env := natstest.Start(t)
	leader, _ := env.Connect(t)
	var mu sync.Mutex
	var ids []string
	if _, err := leader.Subscribe(messaging.SubjectLifecycleOps, func(m *nats.Msg) {
		mu.Lock()
		ids = append(ids, m.Header.Get(natsreq.HeaderRequestID))
		first := len(ids) == 1
		mu.Unlock()
		if !first {
			reply(t, m, &lifecyclev1.Reply{GroupsRevision: 5})
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := leader.Flush(); err != nil {
		t.Fatal(err)
	}
	c := natsreq.New(env.Conn, natsreq.Options{AttemptTimeout: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	revs, err := c.Do(ctx, setSize)
	if err != nil || revs.Groups != 5 {
		t.Fatalf("Do = %+v, %v", revs, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != 2 || ids[0] == "" || ids[0] != ids[1] {
		t.Fatalf("request ids over attempts = %q, want two equal non-empty ids", ids)
	}
}

func TestRetrySafe(t *testing.T) {
	tests := map[string]struct {
		req  *lifecyclev1.Request
		safe bool
	}{
		"increase":  {increase, false},
		"decrease":  {&lifecyclev1.Request{Op: &lifecyclev1.Request_DecreaseTargetSize{DecreaseTargetSize: &lifecyclev1.DecreaseTargetSize{}}}, false},
		"put group": {&lifecyclev1.Request{Op: &lifecyclev1.Request_PutGroup{PutGroup: &lifecyclev1.PutGroup{}}}, false},
		"set size":  {setSize, true},
		"delete":    {&lifecyclev1.Request{Op: &lifecyclev1.Request_DeleteNodes{DeleteNodes: &lifecyclev1.DeleteNodes{}}}, true},
		"action":    {&lifecyclev1.Request{Op: &lifecyclev1.Request_InstanceAction{InstanceAction: &lifecyclev1.InstanceAction{}}}, true},
		"empty":     {&lifecyclev1.Request{}, false},
	}
	for name, tt := range tests {
		if got := natsreq.RetrySafe(tt.req); got != tt.safe {
			t.Errorf("%s: RetrySafe = %v, want %v", name, got, tt.safe)
		}
	}
}
