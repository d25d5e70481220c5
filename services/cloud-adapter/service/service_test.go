package service_test

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/config"
	"github.com/nodesmith/nodesmith/libs/messaging"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/fake"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/service"
)

func TestConfigFlagsAndValidation(t *testing.T) {
	if err := service.DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig is invalid: %v", err)
	}
	// A dead replica's command waits for the ack wait: keep it short, with
	// room for three heartbeats.
	if d := service.DefaultConfig(); d.Topology.CloudAckWait > 10*time.Second || d.Heartbeat*3 > d.Topology.CloudAckWait {
		t.Fatalf("default ack wait %s, heartbeat %s: want an ack wait of at most 10s holding three heartbeats", d.Topology.CloudAckWait, d.Heartbeat)
	}
	exact := service.DefaultConfig()
	exact.Topology.CloudAckWait, exact.Heartbeat = 9*time.Second, 3*time.Second
	if err := exact.Validate(); err != nil {
		t.Fatalf("a heartbeat of exactly a third of the ack wait is refused: %v", err)
	}
	cfg := service.DefaultConfig()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	env := map[string]string{
		"NODESMITH_TENCENT_ENDPOINT":    "127.0.0.1:9000",
		"NODESMITH_TENCENT_SCHEME":      "http",
		"NODESMITH_WATCH_POLL_INTERVAL": "2s",
	}
	err := config.Parse(fs, []string{"--concurrency=3", "--tencent-rate-limits=RunInstances=5:1"}, func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Concurrency != 3 || cfg.TencentEndpoint != "127.0.0.1:9000" || cfg.TencentScheme != "http" ||
		cfg.WatchPollInterval != 2*time.Second || cfg.TencentRateLimits != "RunInstances=5:1" {
		t.Fatalf("flags and environment not applied: %+v", cfg)
	}

	for _, tc := range []struct {
		name  string
		tweak func(*service.Config)
		want  string
	}{
		{"heartbeat at ack wait", func(c *service.Config) { c.Heartbeat = c.Topology.CloudAckWait }, "heartbeat"},
		{"heartbeat above a third of the ack wait", func(c *service.Config) { c.Heartbeat = c.Topology.CloudAckWait/3 + time.Millisecond }, "at most a third of the cloud ack wait"},
		{"ack wait shortened below three heartbeats", func(c *service.Config) { c.Topology.CloudAckWait = 2 * c.Heartbeat }, "--js-cloud-ack-wait"},
		{"no heartbeat", func(c *service.Config) { c.Heartbeat = 0 }, "heartbeat"},
		{"bad rate limits", func(c *service.Config) { c.TencentRateLimits = "RunInstances=fast" }, "rate limits"},
		{"bad scheme", func(c *service.Config) { c.TencentScheme = "ftp" }, "scheme"},
		{"endpoint with scheme", func(c *service.Config) { c.TencentEndpoint = "http://x:1" }, "endpoint"},
		{"no concurrency", func(c *service.Config) { c.Concurrency = 0 }, "concurrency"},
		{"watch shorter than a poll", func(c *service.Config) { c.WatchMaxDuration = time.Millisecond }, "watch"},
		{"no offering unavailable ttl", func(c *service.Config) { c.OfferingUnavailableTTL = 0 }, "--offering-unavailable-ttl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := service.DefaultConfig()
			tc.tweak(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error about %s", err, tc.want)
			}
		})
	}
	if d := service.DefaultConfig(); d.OfferingUnavailableTTL != 3*time.Minute {
		t.Errorf("default --offering-unavailable-ttl = %s, want 3m", d.OfferingUnavailableTTL)
	}
	ttl := service.DefaultConfig()
	fs = flag.NewFlagSet("test", flag.ContinueOnError)
	ttl.RegisterFlags(fs)
	if err := config.Parse(fs, []string{"--offering-unavailable-ttl=90s"}, func(string) (string, bool) { return "", false }); err != nil || ttl.OfferingUnavailableTTL != 90*time.Second {
		t.Errorf("--offering-unavailable-ttl=90s gives %s, %v", ttl.OfferingUnavailableTTL, err)
	}
	err = service.Run(context.Background(), service.Config{}, service.Deps{})
	if err == nil || !strings.Contains(err.Error(), "invalid configuration") {
		t.Fatalf("Run with a zero Config = %v, want a configuration error", err)
	}
}

func TestCreateWatchTerminateInventoryOverJetStream(t *testing.T) {
	s := newStack(t)
	cloud := fake.NewCloud()
	r := s.startReplica("a", testConfig(), service.Deps{Clouds: map[string]ports.Cloud{"fake": cloud}})
	r.waitReady(t)

	s.publish(messaging.SubjectCloudCreate, "create.b1", createCommand("fake", "b1", 3))
	eventually(t, 20*time.Second, "created event", func() bool { _, n := s.createdMapping(); return n == 1 })
	mapping, _ := s.createdMapping()
	var refs []*cloudv1.InstanceRef
	for i := range 3 {
		id := fmt.Sprintf("b1-i%d", i)
		for cid := range mapping[id] {
			refs = append(refs, &cloudv1.InstanceRef{InstanceId: id, Attempt: 1, CloudId: cid, Group: "g1"})
		}
	}
	if len(refs) != 3 {
		t.Fatalf("mapping = %v", mapping)
	}
	target := &cloudv1.Target{Provider: "fake", Account: "acct", Region: "ap-guangzhou"}
	s.publish(messaging.SubjectCloudWatch, "watch.b1", &cloudv1.Command{Body: &cloudv1.Command_Watch{Watch: &cloudv1.WatchInstances{Target: target, Instances: refs}}})
	running := func() int {
		n := 0
		for _, e := range s.recorded() {
			if e.ev.GetObserved().GetState() == cloudv1.CloudState_CLOUD_STATE_RUNNING {
				n++
			}
		}
		return n
	}
	eventually(t, 20*time.Second, "3 RUNNING observations", func() bool { return running() == 3 })

	s.publish(messaging.SubjectCloudTerminate, "terminate.b1", &cloudv1.Command{Body: &cloudv1.Command_Terminate{Terminate: &cloudv1.TerminateInstances{Target: target, ClusterId: "c1", Instances: refs}}})
	s.publish(messaging.SubjectCloudInventory, "inventory.r1", &cloudv1.Command{Body: &cloudv1.Command_ListInventory{ListInventory: &cloudv1.ListInventory{Target: target, ClusterId: "c1", RequestId: "r1"}}})
	eventually(t, 20*time.Second, "terminated and inventory events", func() bool {
		var term, inv bool
		for _, e := range s.recorded() {
			term = term || len(e.ev.GetTerminated().GetInstances()) == 3
			inv = inv || e.ev.GetInventory().GetRequestId() == "r1"
		}
		return term && inv
	})
	subjects := map[string]bool{}
	for _, e := range s.recorded() {
		subjects[e.subject] = true
		if e.msgID == "" {
			t.Errorf("event on %s has no message id", e.subject)
		}
	}
	for _, kind := range []string{"created", "observed", "terminated", "inventory"} {
		if !subjects[messaging.SubjectCloudEvents+"."+kind] {
			t.Errorf("no event on %s.%s (got %v)", messaging.SubjectCloudEvents, kind, subjects)
		}
	}
}

func TestBadCommandsAreDroppedAndGoodOnesStillFlow(t *testing.T) {
	s := newStack(t)
	cloud := fake.NewCloud()
	r := s.startReplica("a", testConfig(), service.Deps{Clouds: map[string]ports.Cloud{"fake": cloud}})
	r.waitReady(t)

	// Undecodable, and decodable but empty: both terminated, never retried.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.env.JS.Publish(ctx, messaging.SubjectCloudCreate, []byte{0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	s.publish(messaging.SubjectCloudCreate, "empty", &cloudv1.Command{})
	s.publish(messaging.SubjectCloudCreate, "create.ok", createCommand("fake", "ok", 1))
	eventually(t, 20*time.Second, "created event", func() bool { _, n := s.createdMapping(); return n == 1 })

	cons, err := s.env.JS.Consumer(ctx, messaging.CommandStream, messaging.ConsumerCloudAdapter)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "command stream empty", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0
	})
}

// TestRedeliveredCommandCreatesOnce publishes the same create command three
// times (as after lost acks beyond the duplicate window): the ClientToken
// makes the cloud return the same VMs and the events' message ids make
// JetStream store the mapping once.
func TestRedeliveredCommandCreatesOnce(t *testing.T) {
	s := newStack(t)
	cloud := fake.NewCloud()
	r := s.startReplica("a", testConfig(), service.Deps{Clouds: map[string]ports.Cloud{"fake": cloud}})
	r.waitReady(t)
	for i := range 3 {
		s.publish(messaging.SubjectCloudCreate, fmt.Sprintf("create.b1.copy%d", i), createCommand("fake", "b1", 4))
	}
	eventually(t, 20*time.Second, "three create calls", func() bool { return len(cloud.Calls().Create) == 3 })
	eventually(t, 20*time.Second, "created event", func() bool { _, n := s.createdMapping(); return n == 1 })
	if n := len(cloud.VMs()); n != 4 {
		t.Fatalf("VMs = %d, want 4", n)
	}
	// Give a duplicate event the chance to show up, then check it did not.
	eventually(t, 20*time.Second, "command stream empty", func() bool {
		cons, err := s.env.JS.Consumer(context.Background(), messaging.CommandStream, messaging.ConsumerCloudAdapter)
		if err != nil {
			return false
		}
		info, err := cons.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	if _, n := s.createdMapping(); n != 1 {
		t.Fatalf("created events = %d, want 1 (duplicates must be dropped by message id)", n)
	}
}

// TestTwoReplicasShareTheWorkAndSurviveAStop runs two replicas on one
// consumer, stops one while creates are in flight (their answers are lost
// after the VMs exist) and checks that every instance got exactly one VM.
func TestTwoReplicasShareTheWorkAndSurviveAStop(t *testing.T) {
	if testing.Short() {
		t.Skip("component test")
	}
	s := newStack(t)
	cloud := fake.NewCloud()
	cloud.CreateDelay = 200 * time.Millisecond
	clouds := map[string]ports.Cloud{"fake": cloud}
	cfg := testConfig()
	cfg.Concurrency = 4
	cfg.ShutdownGrace = 50 * time.Millisecond // cut in-flight creates short
	a := s.startReplica("a", cfg, service.Deps{Clouds: clouds})
	b := s.startReplica("b", cfg, service.Deps{Clouds: clouds})
	a.waitReady(t)
	b.waitReady(t)

	const batches, size = 40, 5
	for i := range batches {
		s.publish(messaging.SubjectCloudCreate, fmt.Sprintf("create.b%02d", i), createCommand("fake", fmt.Sprintf("b%02d", i), size))
	}
	eventually(t, 30*time.Second, "a few batches created", func() bool { _, n := s.createdMapping(); return n >= 5 })
	a.shutdown(t)

	eventually(t, 60*time.Second, "every batch created", func() bool { _, n := s.createdMapping(); return n >= batches })
	mapping, n := s.createdMapping()
	if n != batches {
		t.Errorf("created events = %d, want %d", n, batches)
	}
	if len(mapping) != batches*size {
		t.Errorf("instances mapped = %d, want %d", len(mapping), batches*size)
	}
	for id, cids := range mapping {
		if len(cids) != 1 {
			t.Errorf("instance %s mapped to %d VMs", id, len(cids))
		}
	}
	if vms := len(cloud.VMs()); vms != batches*size {
		t.Errorf("VMs = %d, want %d: a stopped replica must not cause duplicates", vms, batches*size)
	}
}

// TestShutdownHandsWatchesToAnotherReplica: a replica stopping while a
// watch polls hands the command back at once (instead of holding shutdown
// for its grace period), and another replica finishes the watch.
func TestShutdownHandsWatchesToAnotherReplica(t *testing.T) {
	s := newStack(t)
	cloud := fake.NewCloud()
	cloud.BootAfter = 1_000_000
	clouds := map[string]ports.Cloud{"fake": cloud}
	ids, err := cloud.CreateBatch(context.Background(), ports.CreateRequest{Target: ports.Target{Account: "acct", Region: "ap-guangzhou"}, ClientToken: "t", Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.ShutdownGrace = time.Minute // longer than shutdown() waits: only a hand-back lets it return
	a := s.startReplica("a", cfg, service.Deps{Clouds: clouds})
	a.waitReady(t)

	ref := &cloudv1.InstanceRef{InstanceId: "i1", Attempt: 1, CloudId: ids[0], Group: "g1"}
	target := &cloudv1.Target{Provider: "fake", Account: "acct", Region: "ap-guangzhou"}
	s.publish(messaging.SubjectCloudWatch, "watch.i1", &cloudv1.Command{Body: &cloudv1.Command_Watch{Watch: &cloudv1.WatchInstances{Target: target, Instances: []*cloudv1.InstanceRef{ref}}}})
	eventually(t, 20*time.Second, "the watch polling", func() bool { return len(cloud.Calls().Describe) >= 2 })
	a.shutdown(t)

	cloud.SetState(ids[0], domain.StateRunning, "10.1.2.3")
	b := s.startReplica("b", cfg, service.Deps{Clouds: clouds})
	b.waitReady(t)
	eventually(t, 30*time.Second, "RUNNING observed by the other replica", func() bool {
		for _, e := range s.recorded() {
			if o := e.ev.GetObserved(); o.GetState() == cloudv1.CloudState_CLOUD_STATE_RUNNING && o.GetPrivateIp() == "10.1.2.3" {
				return true
			}
		}
		return false
	})
}
