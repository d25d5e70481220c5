package harness

import (
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"

	lifecycle "github.com/nodesmith/nodesmith/services/lifecycle/service"
)

func TestConfigYAMLIsAValidLifecycleConfiguration(t *testing.T) {
	cfg := ConfigYAML([]GroupSpec{
		{ID: "bench", Max: 5000, AfterCreated: JoinScript, AfterCreatedTimeout: 15 * time.Second, CreateParallelism: 5000},
		{ID: "gamma", Max: 10, Zone: "ap-guangzhou-5", BeforeDelete: "kubeadm reset -f", BeforeDeleteTimeout: 10 * time.Second, DeleteParallelism: 3},
		{ID: "bare", Max: 1},
	})
	if err := lifecycle.ValidateConfigData("generated", cfg, ""); err != nil {
		t.Fatalf("lifecycle rejects the generated configuration: %v\n%s", err, cfg)
	}
}

func TestBuildSeedIsDeterministicAndConsistent(t *testing.T) {
	a, b := BuildSeed(7, 100, 3), BuildSeed(7, 100, 3)
	if len(a.Groups) != 7 || len(a.Instances) != 100 || len(a.Nodes) != 100+ControlPlaneNodes || len(a.Want) != len(a.Nodes) {
		t.Fatalf("sizes: %d groups, %d instances, %d nodes, %d wants", len(a.Groups), len(a.Instances), len(a.Nodes), len(a.Want))
	}
	for i := range a.Instances {
		if !proto.Equal(a.Instances[i], b.Instances[i]) {
			t.Fatalf("instance %d differs between two builds with the same seed", i)
		}
	}
	targets := map[string]int32{}
	for _, g := range a.Groups {
		targets[g.GetId()] = g.GetTargetSize()
	}
	counts := map[string]int32{}
	byPID := map[string]string{}
	for _, in := range a.Instances {
		counts[in.GetGroup()]++
		byPID[in.GetProviderId()] = in.GetGroup()
	}
	for g, n := range targets {
		if counts[g] != n {
			t.Errorf("group %s: target %d, %d instances", g, n, counts[g])
		}
	}
	unmanaged := 0
	for i, n := range a.Nodes {
		if a.Want[i] != byPID[n.GetProviderID()] {
			t.Errorf("node %s: want %q, its instance is in %q", n.GetProviderID(), a.Want[i], byPID[n.GetProviderID()])
		}
		if a.Want[i] == "" {
			unmanaged++
		}
	}
	if unmanaged != ControlPlaneNodes {
		t.Errorf("%d unmanaged nodes, want %d", unmanaged, ControlPlaneNodes)
	}
}

// The CA loop makes CA's call mix (issue 21): per loop one Refresh and
// NodeGroups, NodeGroupForNode per node (again per scale-down pass for
// unmanaged nodes, whose empty answers CA does not cache), GetOptions per
// managed node and pass, TargetSize and TemplateNodeInfo per group,
// NodeGroupNodes per group every NodesEvery loops, and on scale-down one
// DeleteNodes per removed node.
func TestCALoopMakesCAsCallMix(t *testing.T) {
	const groups, instances = 10, 200
	seed := BuildSeed(groups, instances, 1)
	conn := dialFloor(t, seed)
	mix := CAMix{OptionsPerNode: 3, OptionsPerRemovedNode: 5, TargetSizePerGroup: 4, NodesEvery: 2}
	l, err := NewCALoop(conn, mix)
	if err != nil {
		t.Fatal(err)
	}
	var removed []int
	for i, g := range seed.Want {
		if g != "" && len(removed) < 2 {
			removed = append(removed, i)
		}
	}
	exp := seed.Expect()
	for _, remove := range [][]int{nil, nil, removed} {
		e := exp
		if remove != nil {
			e = nil // the targets shrink during the loop
		}
		if err := l.Run(seed.Nodes, remove, e); err != nil {
			t.Fatal(err)
		}
	}
	const managed, unmanaged = instances, ControlPlaneNodes
	want := []map[string]int{
		{RPCRefresh: 1, RPCNodeGroups: 1, RPCNodeGroupForNode: managed + unmanaged*(1+3), RPCGetOptions: managed * 3,
			RPCTargetSize: groups * 4, RPCTemplateNodeInfo: groups, RPCNodeGroupNodes: groups},
		{RPCRefresh: 1, RPCNodeGroups: 1, RPCNodeGroupForNode: managed + unmanaged*(1+3), RPCGetOptions: managed * 3,
			RPCTargetSize: groups * 4, RPCTemplateNodeInfo: groups},
		{RPCRefresh: 1, RPCNodeGroups: 1, RPCNodeGroupForNode: managed + unmanaged*(1+5), RPCGetOptions: (managed-2)*3 + 2*5,
			RPCTargetSize: groups * 4, RPCTemplateNodeInfo: groups, RPCNodeGroupNodes: groups, RPCDeleteNodes: 2},
	}
	if len(l.Loops) != len(want) {
		t.Fatalf("%d loops recorded, want %d", len(l.Loops), len(want))
	}
	for i, w := range want {
		got := l.Loops[i]
		if !maps.Equal(got.Calls, w) {
			t.Errorf("loop %d calls = %v, want %v", i, got.Calls, w)
		}
		if got.InProvider <= 0 || got.InProvider > got.Wall {
			t.Errorf("loop %d: %v in the provider, %v in all", i, got.InProvider, got.Wall)
		}
	}
	total := 0
	for _, lat := range l.Latencies {
		total += len(lat)
	}
	if sum := l.Loops[0].Total() + l.Loops[1].Total() + l.Loops[2].Total(); total != sum {
		t.Errorf("%d latencies recorded, %d calls counted", total, sum)
	}
	// The removals reached the provider: the targets shrank.
	c := pb.NewCloudProviderClient(conn)
	for _, i := range removed {
		g := seed.Want[i]
		res, err := c.NodeGroupTargetSize(context.Background(), &pb.NodeGroupTargetSizeRequest{Id: g})
		if err != nil {
			t.Fatal(err)
		}
		n := int32(0)
		for _, j := range removed {
			if seed.Want[j] == g {
				n++
			}
		}
		if res.GetTargetSize() != exp.Targets[g]-n {
			t.Errorf("target of %s = %d after removing %d of its nodes, want %d", g, res.GetTargetSize(), n, exp.Targets[g]-n)
		}
	}
}

// The CA loop checks every answer against the expectation: a wrong group
// for a node or wrong options are errors, so benchmark numbers are of
// correct work.
func TestCALoopChecksAnswers(t *testing.T) {
	seed := BuildSeed(10, 200, 1)
	conn := dialFloor(t, seed)
	l, err := NewCALoop(conn, DefaultCAMix())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(seed.Nodes, nil, seed.Expect()); err != nil {
		t.Fatalf("the floor's answers: %v", err)
	}
	for name, spoil := range map[string]func(*Expect){
		"group of a node": func(e *Expect) {
			for i := range e.Groups {
				if e.Groups[i] != "" {
					e.Groups[i] = "not-" + e.Groups[i]
					return
				}
			}
		},
		"options": func(e *Expect) {
			e.Options["pool-003"] = proto.CloneOf(e.Options["pool-003"])
			e.Options["pool-003"].MaxNodeProvisionTime.Duration++
		},
		"target": func(e *Expect) { e.Targets["pool-001"]++ },
		"instances": func(e *Expect) {
			e.Instances["pool-002"] = e.Instances["pool-002"][1:]
		},
	} {
		exp := seed.Expect()
		exp.Groups = slices.Clone(exp.Groups)
		spoil(exp)
		l.n = 0 // NodeGroupNodes is due
		if err := l.Run(seed.Nodes, nil, exp); err == nil {
			t.Errorf("a wrong %s went unnoticed", name)
		}
	}
	if err := (CAMix{}).Validate(); err == nil {
		t.Error("a mix without TargetSize and NodeGroupNodes calls was accepted")
	}
}

func TestSummarize(t *testing.T) {
	var lat []time.Duration
	for i := 100; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Microsecond)
	}
	s := Summarize(lat)
	if s.N != 100 || s.P50 != 51*time.Microsecond || s.P99 != 100*time.Microsecond || s.Max != 100*time.Microsecond || s.Mean != 50500*time.Nanosecond {
		t.Errorf("Summarize = %+v", s)
	}
	if (Summarize(nil) != Summary{}) {
		t.Error("empty sample")
	}
}

func TestEchoRoundTrips(t *testing.T) {
	s, err := StartEcho("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	c, err := DialEcho(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.RoundTrips(3, 700); err != nil {
		t.Fatal(err)
	}
	if len(c.Latencies) != 3 {
		t.Fatalf("%d round trips recorded, want 3", len(c.Latencies))
	}
	// A frame larger than the server accepts ends the connection.
	if err := c.RoundTrips(1, 2<<20); err == nil {
		t.Fatal("an oversized frame was echoed")
	}
}

func TestScrapeSum(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "# TYPE m gauge\nm{a=\"1\"} 2\nm{a=\"2\"} 3.5\nm_other 100\nplain 7\n")
	}))
	defer srv.Close()
	ctx := context.Background()
	if got, err := ScrapeSum(ctx, srv.URL, "m"); err != nil || got != 5.5 {
		t.Errorf("m = %v, %v; want 5.5", got, err)
	}
	if got, err := ScrapeSum(ctx, srv.URL, "plain"); err != nil || got != 7 {
		t.Errorf("plain = %v, %v; want 7", got, err)
	}
	if _, err := ScrapeSum(ctx, srv.URL, "absent"); err == nil {
		t.Error("a metric with no sample should be an error")
	}
}

func TestReadCPUTime(t *testing.T) {
	before, err := ReadCPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the clock ticks at least twice (no wall-clock bound).
	x := 0
	for {
		for i := range 1_000_000 {
			x += i
		}
		after, err := ReadCPUTime(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after < before {
			t.Fatalf("CPU time went back from %v to %v", before, after)
		}
		if after >= before+20*time.Millisecond {
			break
		}
	}
	_ = x
	if _, err := ReadCPUTime(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}

// dialFloor starts a floor server on seed and returns a connection to it;
// both end with the test.
func dialFloor(t *testing.T, seed *Seeded) *grpc.ClientConn {
	t.Helper()
	f, err := StartFloor(seed, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	conn, err := Dial(f.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
