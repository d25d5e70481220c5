package service_test

// Component tests: service.Run replicas on one embedded NATS server driving
// the real tencentcloud-sdk-go against the CVM emulator.

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/metrics/metricstest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/libs/messaging"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/adaptertest"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/service"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

const provider = "tencentcloud"

// credentialsEnv gives account "acct" the emulator's key through the
// environment, the way a Secret exposed as env would.
var credentialsEnv = []string{
	"NODESMITH_ACCOUNT_ACCT_SECRET_ID=AKIDtest",
	"NODESMITH_ACCOUNT_ACCT_SECRET_KEY=test-secret",
}

// emulator is the CVM emulator with the key of credentialsEnv.
var emulator = adaptertest.Emulator{Start: cvmemu.Start, KeyID: "AKIDtest", Secret: "test-secret"}

// startEmulator starts the emulator with its own rate limits (the
// replicas' pacing must hold against them), changed by tweak.
func startEmulator(t *testing.T, tweak func(*cvmemu.Config)) *cvmemu.Server {
	t.Helper()
	return emulator.Run(t, func(c *cvmemu.Config) {
		c.RateLimits = cvmemu.DefaultConfig().RateLimits
		if tweak != nil {
			tweak(c)
		}
	})
}

func emulatorConfig(srv *cvmemu.Server) service.Config {
	cfg := testConfig()
	cfg.TencentEndpoint = srv.Endpoint()
	cfg.TencentScheme = "http"
	return cfg
}

func TestEmulatorCreateWatchTerminate(t *testing.T) {
	srv := startEmulator(t, nil)
	s := newStack(t)
	reg := prometheus.NewRegistry()
	r := s.startReplica("a", emulatorConfig(srv), service.Deps{Environ: credentialsEnv, Registry: reg})
	r.waitReady(t)

	s.publish(messaging.SubjectCloudCreate, "create.b1", createCommand(provider, "b1", 3))
	eventually(t, 20*time.Second, "created event", func() bool { _, n := s.createdMapping(); return n == 1 })
	mapping, _ := s.createdMapping()
	var refs []*cloudv1.InstanceRef
	for i := range 3 {
		id := fmt.Sprintf("b1-i%d", i)
		for cid := range mapping[id] {
			refs = append(refs, &cloudv1.InstanceRef{InstanceId: id, Attempt: 1, CloudId: cid, Group: "g1"})
			vm, ok := srv.VM(cid)
			if !ok || vm.Tags["nodesmith:batch"] != "b1" || vm.Tags["nodesmith:cluster"] != "c1" || vm.ClientToken != "tok-b1" {
				t.Fatalf("VM %s = %+v, want batch/cluster tags and the command's ClientToken", cid, vm)
			}
		}
	}
	target := &cloudv1.Target{Provider: provider, Account: "acct", Region: "ap-guangzhou"}
	s.publish(messaging.SubjectCloudWatch, "watch.b1", &cloudv1.Command{Body: &cloudv1.Command_Watch{Watch: &cloudv1.WatchInstances{Target: target, Instances: refs}}})
	eventually(t, 20*time.Second, "3 RUNNING observations with IPs", func() bool {
		n := 0
		for _, e := range s.recorded() {
			if o := e.ev.GetObserved(); o.GetState() == cloudv1.CloudState_CLOUD_STATE_RUNNING && o.GetPrivateIp() != "" {
				n++
			}
		}
		return n == 3
	})
	s.publish(messaging.SubjectCloudTerminate, "terminate.b1", &cloudv1.Command{Body: &cloudv1.Command_Terminate{Terminate: &cloudv1.TerminateInstances{Target: target, ClusterId: "c1", Instances: refs}}})
	eventually(t, 20*time.Second, "terminated event", func() bool {
		for _, e := range s.recorded() {
			if len(e.ev.GetTerminated().GetInstances()) == 3 {
				return true
			}
		}
		return false
	})
	if st := srv.Stats(); st.VMsCreated != 3 || st.VMsTerminated != 3 {
		t.Fatalf("emulator created %d and terminated %d VMs, want 3 and 3", st.VMsCreated, st.VMsTerminated)
	}
	for _, m := range []struct {
		name   string
		labels map[string]string
	}{
		{"nodesmith_cloud_api_calls_total", map[string]string{"provider": provider, "action": "RunInstances", "result": "ok"}},
		{"nodesmith_cloud_api_calls_total", map[string]string{"provider": provider, "action": "DescribeInstances", "result": "ok"}},
		{"nodesmith_cloud_api_calls_total", map[string]string{"provider": provider, "action": "TerminateInstances", "result": "ok"}},
		{"nodesmith_cloud_api_call_seconds", map[string]string{"provider": provider, "action": "RunInstances"}},
		{"nodesmith_cloud_rate_limit_wait_seconds", map[string]string{"provider": provider, "action": "RunInstances"}},
		{"nodesmith_cloud_events_published_total", map[string]string{"kind": "created"}},
		{"nodesmith_worker_messages_total", map[string]string{"consumer": messaging.ConsumerCloudAdapter, "outcome": "ack"}},
	} {
		if v := metricstest.Value(t, reg, m.name, m.labels); v < 1 {
			t.Errorf("%s%v = %v, want at least 1", m.name, m.labels, v)
		}
	}
}

func TestEmulatorCapacityFailureIsReported(t *testing.T) {
	srv := startEmulator(t, func(c *cvmemu.Config) { c.Quota.MaxInstances = 2 })
	s := newStack(t)
	r := s.startReplica("a", emulatorConfig(srv), service.Deps{Environ: credentialsEnv})
	r.waitReady(t)
	s.publish(messaging.SubjectCloudCreate, "create.big", createCommand(provider, "big", 3))
	eventually(t, 20*time.Second, "create_failed event", func() bool {
		for _, e := range s.recorded() {
			if f := e.ev.GetCreateFailed(); f != nil {
				if f.GetError().GetKind() != cloudv1.ErrorKind_ERROR_KIND_CAPACITY || f.GetError().GetCode() != cvmemu.CodeInstanceQuota || len(f.GetInstances()) != 3 {
					t.Fatalf("create failure = %v, want 3 instances with a capacity error", f)
				}
				return true
			}
		}
		return false
	})
}

// TestEmulatorRedeliveredCommandCreatesOnce: one create command delivered
// three times creates its VMs once.
func TestEmulatorRedeliveredCommandCreatesOnce(t *testing.T) {
	srv := startEmulator(t, nil)
	s := newStack(t)
	r := s.startReplica("a", emulatorConfig(srv), service.Deps{Environ: credentialsEnv})
	r.waitReady(t)
	for i := range 3 {
		s.publish(messaging.SubjectCloudCreate, fmt.Sprintf("create.b1.copy%d", i), createCommand(provider, "b1", 4))
	}
	eventually(t, 20*time.Second, "three RunInstances calls", func() bool { return srv.Stats().RunInstancesCalls == 3 })
	eventually(t, 20*time.Second, "created event", func() bool { _, n := s.createdMapping(); return n == 1 })
	st := srv.Stats()
	if st.VMsCreated != 4 || st.TokensCreatedTwice != 0 {
		t.Fatalf("VMs created %d (want 4), tokens created twice %d", st.VMsCreated, st.TokensCreatedTwice)
	}
}

// TestEmulatorTwoReplicasStopOneMidBatch runs two replicas on the shared
// consumer while the cloud sometimes fails after committing; one replica is
// stopped while creates are in flight. Every instance gets exactly one VM,
// and every batch exactly one created event.
func TestEmulatorTwoReplicasStopOneMidBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("component test")
	}
	srv := startEmulator(t, func(c *cvmemu.Config) {
		c.RateLimits = map[string]float64{cvmemu.ActionRunInstances: 50, cvmemu.ActionDescribeInstances: 100, cvmemu.ActionTerminateInstances: 50}
		c.Seed = 7
	})
	// Slow, and every fifth call answers an error after the VMs exist.
	srv.SetFaults(cvmemu.ActionRunInstances, cvmemu.ActionFaults{Latency: 100 * time.Millisecond, ErrorRate: 0.2, ErrorCode: cvmemu.CodeInternalError, AfterCommit: true})
	s := newStack(t)
	cfg := emulatorConfig(srv)
	cfg.Concurrency = 4
	cfg.ShutdownGrace = 50 * time.Millisecond
	// Limits are per replica: two replicas share the account's 50/s.
	cfg.TencentRateLimits = "RunInstances=20:2,DescribeInstances=40:4,TerminateInstances=20:2"
	// Both replicas share one registry, as services do in the embedded stack.
	reg := prometheus.NewRegistry()
	a := s.startReplica("a", cfg, service.Deps{Environ: credentialsEnv, Registry: reg})
	b := s.startReplica("b", cfg, service.Deps{Environ: credentialsEnv, Registry: reg})
	a.waitReady(t)
	b.waitReady(t)

	const batches, size = 40, 5
	for i := range batches {
		s.publish(messaging.SubjectCloudCreate, fmt.Sprintf("create.b%02d", i), createCommand(provider, fmt.Sprintf("b%02d", i), size))
	}
	eventually(t, 30*time.Second, "a few batches created", func() bool { _, n := s.createdMapping(); return n >= 5 })
	a.shutdown(t)

	eventually(t, 90*time.Second, "every batch created", func() bool { _, n := s.createdMapping(); return n >= batches })
	mapping, n := s.createdMapping()
	if n != batches || len(mapping) != batches*size {
		t.Fatalf("created events %d (want %d), instances mapped %d (want %d)", n, batches, len(mapping), batches*size)
	}
	for id, cids := range mapping {
		if len(cids) != 1 {
			t.Fatalf("instance %s mapped to %d VMs", id, len(cids))
		}
	}
	st := srv.Stats()
	if st.VMsCreated != batches*size || st.TokensCreatedTwice != 0 || st.VMsCreatedWithoutToken != 0 {
		t.Fatalf("emulator: %d VMs created (want %d), %d tokens created twice, %d VMs without token",
			st.VMsCreated, batches*size, st.TokensCreatedTwice, st.VMsCreatedWithoutToken)
	}
	if st.Throttled[cvmemu.ActionRunInstances] != 0 {
		t.Fatalf("emulator throttled RunInstances %d times: the client-side limit did not hold", st.Throttled[cvmemu.ActionRunInstances])
	}
}

// TestKilledReplicaMidRunInstancesIsReplacedWithinTheAckWait kills a
// replica at the worst moment of a create: its RunInstances has created
// the VMs, the answer has not reached it. The killed replica neither acks
// nor naks the command, so JetStream gives it to the other replica once
// the ack wait has passed since the last heartbeat; that replica calls
// RunInstances again with the same ClientToken and gets the same VMs. The
// batch gets exactly the VMs it asked for, and one created event.
func TestKilledReplicaMidRunInstancesIsReplacedWithinTheAckWait(t *testing.T) {
	srv := startEmulator(t, nil)
	// Replica a reaches the emulator through a Hold, b directly.
	hold := cvmemu.NewHold(srv)
	hs := httptest.NewServer(hold)
	t.Cleanup(hs.Close)
	t.Cleanup(hold.ReleaseAll) // runs first: a held call must not block Close
	s := newStack(t)

	cfg := emulatorConfig(srv)
	// The stack's consumer has the default ack wait: lifecycle (the only
	// service allowed to) updates it to the --js-cloud-ack-wait every
	// service is given.
	cfg.Topology.CloudAckWait = 3 * time.Second
	ectx, ecancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ecancel()
	if err := messaging.Ensure(ectx, s.env.JS, cfg.Topology); err != nil {
		t.Fatal(err)
	}
	cfg.Heartbeat = time.Second
	cfg.ShutdownGrace = 10 * time.Millisecond
	cfgA := cfg
	cfgA.TencentEndpoint = strings.TrimPrefix(hs.URL, "http://")
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a := s.startKillableReplica("a", cfgA, service.Deps{Environ: credentialsEnv, Registry: regA})
	a.waitReady(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cons, err := s.env.JS.Consumer(ctx, messaging.CommandStream, messaging.ConsumerCloudAdapter)
	if err != nil {
		t.Fatal(err)
	}
	if got := cons.CachedInfo().Config.AckWait; got != cfg.Topology.CloudAckWait {
		t.Fatalf("consumer ack wait = %s, want the replicas' %s", got, cfg.Topology.CloudAckWait)
	}

	call := hold.Next(cvmemu.ActionRunInstances)
	const size = 4
	s.publish(messaging.SubjectCloudCreate, "create.b1", createCommand(provider, "b1", size))
	select {
	case <-call.Held():
	case <-ctx.Done():
		t.Fatal("replica a's RunInstances never reached the emulator")
	}
	if got := srv.Stats().VMsCreated; got != size {
		t.Fatalf("VMs created by a's call = %d, want %d", got, size)
	}
	// b is up before the kill, and cannot have the command: a holds it.
	b := s.startReplica("b", cfg, service.Deps{Environ: credentialsEnv, Registry: regB})
	b.waitReady(t)

	killed := time.Now()
	a.kill(t)
	select {
	case <-call.ClientGone():
	case <-ctx.Done():
		t.Fatal("the killed replica's RunInstances connection stayed open")
	}
	// Generous: the mechanism is asserted below, not the timing.
	eventually(t, cfg.Topology.CloudAckWait+30*time.Second, "b's RunInstances", func() bool { return srv.Stats().RunInstancesCalls == 2 })
	redelivery := time.Since(killed)
	eventually(t, 20*time.Second, "created event", func() bool { _, n := s.createdMapping(); return n == 1 })
	t.Logf("command redelivered to the other replica %s after the kill (ack wait %s, heartbeat %s)",
		redelivery.Round(10*time.Millisecond), cfg.Topology.CloudAckWait, cfg.Heartbeat)

	// Exactly the requested VMs: b's call replayed a's ClientToken.
	st := srv.Stats()
	replays := 0
	for _, n := range st.ClientTokenReplays {
		replays += n
	}
	if st.VMsCreated != size || st.TokensCreatedTwice != 0 || replays != 1 || call.ClientToken() != "tok-b1" {
		t.Fatalf("emulator: %d VMs created (want %d), %d tokens created twice, %d replays (want 1), held token %q",
			st.VMsCreated, size, st.TokensCreatedTwice, replays, call.ClientToken())
	}
	mapping, n := s.createdMapping()
	if n != 1 || len(mapping) != size {
		t.Fatalf("created events %d (want 1) mapping %d instances (want %d)", n, len(mapping), size)
	}
	for id, cids := range mapping {
		for cid := range cids {
			if vm, ok := srv.VM(cid); len(cids) != 1 || !ok || vm.ClientToken != "tok-b1" {
				t.Fatalf("instance %s mapped to %v; VM %s: %+v", id, cids, cid, vm)
			}
		}
	}

	// The command was delivered twice: to a, which never acked it, then
	// to b as a redelivery, which b acked.
	eventually(t, 20*time.Second, "command acked", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Delivered.Consumer != 2 || info.Delivered.Stream != 1 {
		t.Fatalf("consumer delivered %d times up to stream sequence %d, want 2 deliveries of message 1", info.Delivered.Consumer, info.Delivered.Stream)
	}
	worker := func(reg *prometheus.Registry, name string, labels map[string]string) float64 {
		return metricstest.Value(t, reg, name, labels)
	}
	consumer := map[string]string{"consumer": messaging.ConsumerCloudAdapter}
	ack := map[string]string{"consumer": messaging.ConsumerCloudAdapter, "outcome": "ack"}
	if r, acked := worker(regB, "nodesmith_worker_redeliveries_total", consumer), worker(regB, "nodesmith_worker_messages_total", ack); r != 1 || acked != 1 {
		t.Fatalf("replica b: %v redeliveries, %v acks; want the redelivered command, acked", r, acked)
	}
	if acked := worker(regA, "nodesmith_worker_messages_total", ack); acked != 0 {
		t.Fatalf("the killed replica acked %v commands", acked)
	}
}
