package harness

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

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

// The CA loop against the floor server checks every answer: a wrong
// group for a node is an error, so benchmark numbers are of correct work.
func TestCALoopAgainstTheFloorChecksAnswers(t *testing.T) {
	seed := BuildSeed(10, 200, 1)
	f, err := StartFloor(seed, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	conn, err := Dial(f.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	l := NewCALoop(conn)
	if err := l.Run(seed.Nodes, seed.Want); err != nil {
		t.Fatal(err)
	}
	if got := len(l.Latencies[RPCNodeGroupForNode]); got != len(seed.Nodes) {
		t.Errorf("%d NodeGroupForNode calls recorded, want %d", got, len(seed.Nodes))
	}
	if len(l.Latencies[RPCTargetSize]) != 10 || len(l.Latencies[RPCGetOptions]) != 10 || len(l.Loops) != 1 {
		t.Errorf("per-group calls or loops not recorded: %d %d %d", len(l.Latencies[RPCTargetSize]), len(l.Latencies[RPCGetOptions]), len(l.Loops))
	}
	wrong := append([]string(nil), seed.Want...)
	for i := range wrong {
		if wrong[i] != "" {
			wrong[i] = "not-" + wrong[i]
			break
		}
	}
	if err := l.Run(seed.Nodes, wrong); err == nil {
		t.Error("a wrong answer went unnoticed")
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
