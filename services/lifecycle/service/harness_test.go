package service_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/libs/sealed"
	"github.com/nodesmith/nodesmith/libs/testwait"
	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/natskv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/fakeworkers"
	"github.com/nodesmith/nodesmith/services/lifecycle/service"
)

const testConfig = `
accounts:
  dev:
    region: ap-guangzhou
instanceTemplates:
  small:
    account: dev
    zone: ap-guangzhou-3
    instanceType: S5.MEDIUM4
    hookEnv:
      API_SERVER: 10.0.0.1:6443
    parameters:
      ImageId: img-123
nodeGroups:
  - id: workers
    minSize: 0
    maxSize: 20
    instanceTemplate: small
    nodeTemplate:
      labels: {role: worker}
      taints:
        - {key: dedicated, value: workers, effect: NoSchedule}
    hooks:
      afterCreated:
        script: |
          set -eu
          etc="${SIMVM_SANDBOX:-}/etc"
          echo "KUBELET_EXTRA_ARGS=--provider-id=$PROVIDER_ID" > "$etc/default/kubelet"
          kubeadm join "$API_SERVER" --node-name "$NODE_NAME" \
            --token "$(cat "$etc/kubeadm/token")" \
            --discovery-token-ca-cert-hash "$(cat "$etc/kubeadm/ca-cert-hash")"
      beforeDelete:
        script: kubectl drain "$NODE_NAME"
`

// stack is one lifecycle service with fake workers on a real JetStream.
type stack struct {
	t       *testing.T
	env     *natstest.Env
	workers *fakeworkers.Workers
	ops     *nats.Conn
	store   *natskv.Store
	cfg     service.Config
	deps    service.Deps

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan error
	workCtx context.CancelFunc
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() && os.Getenv("LIFECYCLE_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testKeyFile is a sealing key ring for the package's tests (the config
// file's hook env values are sealed).
var testKeyFile = sync.OnceValue(func() string {
	dir, err := os.MkdirTemp("", "lifecycle-test-key")
	if err != nil {
		panic(err)
	}
	p := filepath.Join(dir, "key")
	if _, err := sealed.GenerateKeyFile(p); err != nil {
		panic(err)
	}
	return p
})

func fastConfig(yaml string) service.Config {
	cfg := service.DefaultConfig()
	cfg.SecretsKeyFile = testKeyFile()
	cfg.HealthAddr = ""
	cfg.ConfigData = []byte(yaml)
	cfg.TickInterval = 20 * time.Millisecond
	cfg.RetryBackoff = 20 * time.Millisecond
	cfg.RetryBackoffMax = 200 * time.Millisecond
	cfg.ReconcileInterval = 0
	cfg.ShutdownGrace = 2 * time.Second
	cfg.Cluster = service.ClusterNone
	return cfg
}

func newStack(t *testing.T, cfg service.Config, deps service.Deps) *stack {
	t.Helper()
	env := natstest.Start(t)
	return newStackOn(t, env, cfg, deps)
}

func newStackOn(t *testing.T, env *natstest.Env, cfg service.Config, deps service.Deps) *stack {
	t.Helper()
	store, err := natskv.Open(context.Background(), env.JS)
	if err != nil {
		t.Fatal(err)
	}
	if deps.Logger == nil {
		deps.Logger = testLogger(t)
	}
	s := &stack{t: t, env: env, store: store, cfg: cfg, deps: deps}
	// The fake workers play both cloud-adapter and hook-runner on one
	// connection: the test admin's.
	_, wjs := env.ConnectAdmin(t)
	s.workers = fakeworkers.New(wjs, nil)
	s.ops, _ = env.ConnectAs(t, natsauth.APIGateway) // who requests operations
	wctx, wcancel := context.WithCancel(context.Background())
	s.workCtx = wcancel
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		if err := s.workers.Run(wctx); err != nil {
			t.Errorf("fake workers: %v", err)
		}
	}()
	t.Cleanup(func() { wcancel(); <-wdone })
	s.start()
	t.Cleanup(s.stop)
	return s
}

// start runs the service (again) on its own NATS connection.
func (s *stack) start() {
	s.t.Helper()
	nc, _ := s.env.Connect(s.t)
	deps := s.deps
	deps.Conn = nc
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- service.Run(ctx, s.cfg, deps) }()
	s.mu.Lock()
	s.cancel, s.done = cancel, done
	s.mu.Unlock()
	s.waitLeading()
}

// waitLeading waits until the service answers operations as leader.
func (s *stack) waitLeading() {
	s.t.Helper()
	probe := &lifecyclev1.Request{Op: &lifecyclev1.Request_IncreaseSize{IncreaseSize: &lifecyclev1.IncreaseSize{Group: "no-such-group", Delta: 1}}}
	wantCode(s.t, s.request(probe), codes.NotFound)
}

// stop shuts the service down gracefully and waits for it.
func (s *stack) stop() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel, s.done = nil, nil
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			s.t.Errorf("service.Run returned %v", err)
		}
	case <-time.After(30 * time.Second):
		s.t.Fatal("service did not stop within 30s")
	}
}

// request sends an operation, retrying while no leader answers.
func (s *stack) request(req *lifecyclev1.Request) *lifecyclev1.Reply {
	s.t.Helper()
	data, err := proto.Marshal(req)
	if err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		msg, err := s.ops.Request(messaging.SubjectLifecycleOps, data, 10*time.Second)
		if err == nil {
			var reply lifecyclev1.Reply
			if err := proto.Unmarshal(msg.Data, &reply); err != nil {
				s.t.Fatal(err)
			}
			if reply.GetError().GetCode() == int32(codes.Unavailable) && strings.Contains(reply.GetError().GetMessage(), "not leading") && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			return &reply
		}
		if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(deadline) {
			s.t.Fatalf("request: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *stack) increase(group string, delta int) *lifecyclev1.Reply {
	return s.request(&lifecyclev1.Request{Op: &lifecyclev1.Request_IncreaseSize{IncreaseSize: &lifecyclev1.IncreaseSize{Group: group, Delta: int32(delta)}}})
}

func (s *stack) decrease(group string, delta int) *lifecyclev1.Reply {
	return s.request(&lifecyclev1.Request{Op: &lifecyclev1.Request_DecreaseTargetSize{DecreaseTargetSize: &lifecyclev1.DecreaseTargetSize{Group: group, Delta: int32(delta)}}})
}

func (s *stack) deleteNodes(group string, providerIDs ...string) *lifecyclev1.Reply {
	var refs []*lifecyclev1.NodeRef
	for _, p := range providerIDs {
		refs = append(refs, &lifecyclev1.NodeRef{ProviderId: p, Name: p})
	}
	return s.request(&lifecyclev1.Request{Op: &lifecyclev1.Request_DeleteNodes{DeleteNodes: &lifecyclev1.DeleteNodes{Group: group, Nodes: refs}}})
}

func mustOK(t *testing.T, r *lifecyclev1.Reply) *lifecyclev1.Reply {
	t.Helper()
	if r.GetError() != nil {
		t.Fatalf("operation failed: %s: %s", codes.Code(r.GetError().GetCode()), r.GetError().GetMessage())
	}
	return r
}

func wantCode(t *testing.T, r *lifecyclev1.Reply, c codes.Code) {
	t.Helper()
	if got := codes.Code(r.GetError().GetCode()); got != c {
		t.Fatalf("error code = %s (%s), want %s", got, r.GetError().GetMessage(), c)
	}
}

func (s *stack) instances(group string) []domain.Instance {
	s.t.Helper()
	vs, err := s.store.ListInstances(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	var out []domain.Instance
	for _, v := range vs {
		if group == "" || v.Instance.Group == group {
			out = append(out, v.Instance)
		}
	}
	return out
}

func (s *stack) group(id string) domain.NodeGroup {
	s.t.Helper()
	g, err := s.store.GetGroup(context.Background(), id)
	if err != nil {
		s.t.Fatal(err)
	}
	return g.Group
}

func countIn(is []domain.Instance, st domain.State) int {
	n := 0
	for _, in := range is {
		if in.State == st {
			n++
		}
	}
	return n
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 45*time.Second, what, cond)
}

func summary(is []domain.Instance) string {
	var b strings.Builder
	for _, in := range is {
		b.WriteString(in.ID + "=" + in.State.String())
		if in.CreationFailed {
			b.WriteString("(failed)")
		}
		if in.LastError != nil {
			b.WriteString("[" + in.LastError.Code + "]")
		}
		b.WriteString(" ")
	}
	return b.String()
}
