package embedded

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// stack is one run of the embedded system on free ports.
type stack struct {
	addrs  Addrs
	cancel context.CancelFunc
	done   chan error
}

func testConfig(t *testing.T, dataDir string, sshPort int) Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.DataDir = dataDir
	cfg.GRPCAddr, cfg.RESTAddr, cfg.OpsAddr, cfg.EmulatorAddr, cfg.ECSEmulatorAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.MetadataAddr, cfg.EmulatorAdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.NATSPort = -1
	cfg.SSHPort = sshPort
	cfg.BootDelay = 200 * time.Millisecond
	cfg.ReadyDelay = 100 * time.Millisecond
	return cfg
}

func start(t *testing.T, cfg Config) *stack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &stack{cancel: cancel, done: make(chan error, 1)}
	ready := make(chan Addrs, 1)
	timeout := 60 * time.Second
	if cfg.Kube {
		timeout = 4 * time.Minute // etcd and kube-apiserver start first, on a loaded machine
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	go func() { s.done <- Run(ctx, cfg, log, func(a Addrs) { ready <- a }) }()
	select {
	case s.addrs = <-ready:
	case err := <-s.done:
		cancel()
		t.Fatalf("stack did not start: %v", err)
	case <-time.After(timeout):
		cancel()
		t.Fatalf("stack not ready after %s", timeout)
	}
	return s
}

// startWithEmulator starts the stack like start and also returns its
// cloud emulator (to inject stock-outs, read VMs); each of before sees the
// emulator before any service calls it.
func startWithEmulator(t *testing.T, cfg Config, before ...func(*cvmemu.Server)) (*stack, *cvmemu.Server) {
	t.Helper()
	var emu *cvmemu.Server
	emulatorHook = func(e *cvmemu.Server) {
		emu = e
		for _, f := range before {
			f(e)
		}
	}
	t.Cleanup(func() { emulatorHook = nil })
	return start(t, cfg), emu
}

func (s *stack) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("stack stopped with an error: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("stack did not stop within 60s")
	}
}

func (s *stack) client(t *testing.T) pb.CloudProviderClient {
	t.Helper()
	conn, err := grpc.NewClient(s.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewCloudProviderClient(conn)
}

func call[T any](t *testing.T, f func(context.Context) (T, error)) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // CA's grpc_timeout
	defer cancel()
	v, err := f(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func waitRunning(t *testing.T, c pb.CloudProviderClient, group string, want int) []*pb.Instance {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		res := call(t, func(ctx context.Context) (*pb.NodeGroupNodesResponse, error) {
			return c.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: group})
		})
		running := 0
		for _, in := range res.GetInstances() {
			if in.GetStatus().GetInstanceState() == pb.InstanceStatus_instanceRunning {
				running++
			}
			if ei := in.GetStatus().GetErrorInfo(); ei.GetErrorCode() != "" {
				t.Fatalf("instance %s reports a creation error: %v", in.GetId(), ei)
			}
		}
		if running == want && len(res.GetInstances()) == want {
			return res.GetInstances()
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90s: %d of %d instances running: %v", running, want, res.GetInstances())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestScaleUpRunsEndToEndAndSurvivesRestart is the acceptance path of
// `make run`: IncreaseSize raises the target at once, the instances go
// through the real SDK, emulator, SSH hook and simulated cluster to
// instanceRunning, and a restart keeps groups, targets and instances.
func TestScaleUpRunsEndToEndAndSurvivesRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	dataDir := t.TempDir()
	cfg := testConfig(t, dataDir, 20000+rand.IntN(20000))

	s := start(t, cfg)
	c := s.client(t)
	groups := call(t, func(ctx context.Context) (*pb.NodeGroupsResponse, error) {
		return c.NodeGroups(ctx, &pb.NodeGroupsRequest{})
	})
	for deadline := time.Now().Add(30 * time.Second); len(groups.GetNodeGroups()) < 2 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond) // lifecycle applies the config file asynchronously
		groups = call(t, func(ctx context.Context) (*pb.NodeGroupsResponse, error) {
			return c.NodeGroups(ctx, &pb.NodeGroupsRequest{})
		})
	}
	var workers *pb.NodeGroup
	for _, g := range groups.GetNodeGroups() {
		if g.GetId() == "workers" {
			workers = g
		}
	}
	if len(groups.GetNodeGroups()) != 2 || workers == nil || workers.GetMaxSize() < 10 {
		t.Fatalf("built-in config (workers and ecs-workers): %v", groups.GetNodeGroups())
	}
	call(t, func(ctx context.Context) (*pb.NodeGroupIncreaseSizeResponse, error) {
		return c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "workers", Delta: 3})
	})
	// Read-your-writes: the very next call sees the new target.
	if ts := call(t, func(ctx context.Context) (*pb.NodeGroupTargetSizeResponse, error) {
		return c.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: "workers"})
	}); ts.GetTargetSize() != 3 {
		t.Fatalf("target right after IncreaseSize = %d, want 3", ts.GetTargetSize())
	}
	before := waitRunning(t, c, "workers", 3)
	for _, in := range before {
		ng := call(t, func(ctx context.Context) (*pb.NodeGroupForNodeResponse, error) {
			return c.NodeGroupForNode(ctx, &pb.NodeGroupForNodeRequest{Node: &pb.ExternalGrpcNode{ProviderID: in.GetId()}})
		})
		if ng.GetNodeGroup().GetId() != "workers" {
			t.Errorf("NodeGroupForNode(%s) = %q", in.GetId(), ng.GetNodeGroup().GetId())
		}
		// The VM's metadata service (the spot node agent's source) knows it
		// and announces no reclaim.
		cloudID := in.GetId()[strings.LastIndex(in.GetId(), "/")+1:]
		if got, code := httpGet(t, s.addrs.Metadata+"/"+cloudID+"/latest/meta-data/instance-id"); code != http.StatusOK || got != cloudID {
			t.Errorf("metadata instance-id of %s = %d %q", cloudID, code, got)
		}
		if _, code := httpGet(t, s.addrs.Metadata+"/"+cloudID+"/latest/meta-data/spot/termination-time"); code != http.StatusNotFound {
			t.Errorf("termination-time of %s (no reclaim) = %d, want 404", cloudID, code)
		}
	}
	s.stop(t)

	s = start(t, cfg)
	c = s.client(t)
	if ts := call(t, func(ctx context.Context) (*pb.NodeGroupTargetSizeResponse, error) {
		return c.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: "workers"})
	}); ts.GetTargetSize() != 3 {
		t.Fatalf("target after restart = %d, want 3", ts.GetTargetSize())
	}
	after := waitRunning(t, c, "workers", 3)
	ids := func(ins []*pb.Instance) map[string]bool {
		m := map[string]bool{}
		for _, in := range ins {
			m[in.GetId()] = true
		}
		return m
	}
	b, a := ids(before), ids(after)
	for id := range b {
		if !a[id] {
			t.Errorf("instance %s lost across the restart (after: %v)", id, after)
		}
	}
	s.stop(t)
}

func TestBadConfigStopsStartWithFileFieldAndProblem(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]struct{ yaml, want string }{
		"min > max": {
			yaml: strings.Replace(string(DefaultNodeGroupConfig), "minSize: 0", "minSize: 30", 1),
			want: "nodeGroups[0].minSize",
		},
		"unknown template": {
			yaml: strings.Replace(string(DefaultNodeGroupConfig), "instanceTemplate: default", "instanceTemplate: nope", 1),
			want: "nodeGroups[0].instanceTemplate",
		},
		"malformed yaml": {yaml: "nodeGroups: [\n  - id: x\n    minSize: : :\n", want: "bad.yaml"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, "bad.yaml")
			if err := os.WriteFile(file, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := testConfig(t, filepath.Join(dir, name), 2222)
			cfg.ConfigFile = file
			err := Run(context.Background(), cfg, slog.New(slog.DiscardHandler), nil)
			if err == nil {
				t.Fatal("start-up succeeded with a bad config")
			}
			if !strings.Contains(err.Error(), "bad.yaml") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error should name the file and %q: %v", tc.want, err)
			}
		})
	}
}

func httpGet(t *testing.T, url string) (string, int) {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // a test against loopback
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return strings.TrimSpace(string(b)), resp.StatusCode
}
