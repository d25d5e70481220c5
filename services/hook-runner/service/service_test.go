package service_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	hookv1 "github.com/nodesmith/nodesmith/proto/nodesmith/hook/v1"

	"github.com/nodesmith/nodesmith/libs/health"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/metrics/metricstest"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/libs/testwait"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/sshdtest"
	"github.com/nodesmith/nodesmith/services/hook-runner/service"
)

const resultSubject = messaging.SubjectHookEvents + ".result"

// replica is one hook-runner started in-process with service.Run.
type replica struct {
	id     string
	reg    *prometheus.Registry
	checks *health.Checks
	cancel context.CancelFunc
	done   chan error
}

func startReplica(t *testing.T, env *natstest.Env, srv *sshdtest.Server, id string, mutate func(*service.Config)) *replica {
	t.Helper()
	return startReplicaLogging(t, env, srv, id, mutate, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
}

// startReplicaLogging is startReplica with the replica's logger.
func startReplicaLogging(t *testing.T, env *natstest.Env, srv *sshdtest.Server, id string, mutate func(*service.Config), log *slog.Logger) *replica {
	t.Helper()
	cfg := service.DefaultConfig()
	cfg.NATS = env.Options(natsauth.HookRunner, cfg.NATS)
	cfg.HealthAddr = ""
	cfg.RunnerID = id
	cfg.Concurrency = 4
	cfg.ShutdownGrace = time.Second
	cfg.SSH.User = srv.User
	cfg.SSH.KeyFile = srv.ClientKeyFile(t, "")
	cfg.SSH.KnownHostsFiles = []string{sshdtest.WriteFile(t, "known_hosts", srv.KnownHostsLine()+"\n")}
	cfg.SSH.Port = srv.Port
	if mutate != nil {
		mutate(&cfg)
	}
	r := &replica{id: id, reg: prometheus.NewRegistry(), checks: &health.Checks{}, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	log = log.With("replica", id)
	go func() { r.done <- service.Run(ctx, cfg, service.Deps{Logger: log, Registry: r.reg, Health: r.checks}) }()
	t.Cleanup(func() { r.stop(t) })
	waitFor(t, "replica "+id+" ready", func() bool {
		select {
		case err := <-r.done:
			t.Fatalf("replica %s exited during start-up: %v", id, err)
		default:
		}
		return len(r.checks.Run(context.Background())) == 0
	})
	return r
}

// stop cancels the replica and waits for Run to return.
func (r *replica) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("replica %s: Run returned %v", r.id, err)
		}
	case <-time.After(time.Minute):
		t.Errorf("replica %s did not stop", r.id)
	}
}

// inFlight is the number of hooks the replica is running now.
func (r *replica) inFlight(t *testing.T) float64 {
	t.Helper()
	return metricstest.Value(t, r.reg, "nodesmith_worker_in_flight", nil)
}

func publishHook(t *testing.T, js jetstream.JetStream, cmd *hookv1.RunHook) {
	t.Helper()
	data, err := proto.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id := fmt.Sprintf("hook.%s.%d", cmd.GetInstanceId(), cmd.GetAttempt())
	if _, err := js.Publish(ctx, messaging.SubjectHookRun, data, jetstream.WithMsgID(id)); err != nil {
		t.Fatal(err)
	}
}

// results returns every hook result stored on the event stream.
func results(t *testing.T, js jetstream.JetStream) []*hookv1.HookResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, messaging.EventStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{resultSubject}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(100)
	if err != nil {
		t.Fatal(err)
	}
	var out []*hookv1.HookResult
	for m := range batch.Messages() {
		var r hookv1.HookResult
		if err := proto.Unmarshal(m.Data(), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, &r)
	}
	return out
}

// TestStoppedReplicaHandsHookOver runs two replicas on one NATS server.
// The replica running a hook is stopped mid-script: its run is killed on
// the VM, no result is published for it, and the other replica runs the
// same attempt once more to completion.
func TestStoppedReplicaHandsHookOver(t *testing.T) {
	if testing.Short() {
		t.Skip("component test: NATS, sshd and two replicas")
	}
	env := natstest.Start(t)
	_, observer := env.ConnectAdmin(t) // reads the results no service but lifecycle may
	srv := sshdtest.Start(t, sshdtest.Options{})
	a := startReplica(t, env, srv, "runner-a", nil)
	b := startReplica(t, env, srv, "runner-b", nil)

	dir := t.TempDir()
	// Each run first checks that no earlier run is still alive (a
	// redelivery racing the heartbeat would show up here), then records
	// itself and waits for the test's go-ahead.
	script := fmt.Sprintf(`#!/bin/sh
for p in $(cat %[1]s/pids 2>/dev/null); do
	state=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -c1)
	if [ -n "$state" ] && [ "$state" != Z ]; then echo "overlaps run $p" >> %[1]s/overlap; fi
done
echo run >> %[1]s/runs
sh -c 'echo $PPID' >> %[1]s/pids
while [ ! -e %[1]s/release ]; do sleep 0.1; done
echo "joined $NODE_NAME"
`, dir)
	publishHook(t, env.JS, &hookv1.RunHook{
		InstanceId: "ins-handover", Attempt: 1, Hook: hookv1.HookKind_HOOK_KIND_AFTER_CREATED, Group: "workers",
		Host: "127.0.0.1", Script: script, Env: map[string]string{"NODE_NAME": "node-handover"},
		Timeout: durationpb.New(3 * time.Minute), HookName: "join",
	})

	waitFor(t, "first run", func() bool { return countLines(t, filepath.Join(dir, "runs")) == 1 })
	var running, other *replica
	waitFor(t, "a replica reporting the hook in flight", func() bool {
		switch {
		case a.inFlight(t) == 1:
			running, other = a, b
		case b.inFlight(t) == 1:
			running, other = b, a
		}
		return running != nil
	})
	firstPID := readPIDs(t, filepath.Join(dir, "pids"))[0]

	// Let the first run go on for a few of the consumer's shortest ack
	// deadlines (BackOff[0] = 1s): heartbeats must keep the command from
	// being redelivered to the idle replica meanwhile.
	time.Sleep(3 * time.Second)
	if info := hookConsumerInfo(t, env.JS); info.NumRedelivered != 0 || info.NumAckPending != 1 {
		t.Fatalf("while the hook runs: %d redelivered, %d pending ack; want 0 and 1", info.NumRedelivered, info.NumAckPending)
	}
	if n := countLines(t, filepath.Join(dir, "runs")); n != 1 {
		t.Fatalf("%d runs while the first is still going, want 1", n)
	}

	running.stop(t) // SIGTERM: the grace (1s) passes with the script still waiting
	waitFor(t, "the interrupted run to be killed on the VM", func() bool { return !processAlive(firstPID) })
	if rs := results(t, observer); len(rs) != 0 {
		t.Fatalf("the stopped replica published %d results for an interrupted run: %v", len(rs), rs)
	}

	waitFor(t, "the other replica to re-run the hook", func() bool { return countLines(t, filepath.Join(dir, "runs")) == 2 })
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the hook result", func() bool { return len(results(t, observer)) > 0 })
	waitFor(t, "the command to be acked", func() bool { return consumerAcked(t, env.JS) })

	rs := results(t, observer)
	if len(rs) != 1 {
		t.Fatalf("got %d results, want exactly 1: %v", len(rs), rs)
	}
	r := rs[0]
	if !r.GetSucceeded() || r.GetRunner() != other.id || r.GetAttempt() != 1 || r.GetInstanceId() != "ins-handover" ||
		r.GetHook() != hookv1.HookKind_HOOK_KIND_AFTER_CREATED || r.GetExitCode() != 0 ||
		!strings.Contains(r.GetOutputTail(), "joined node-handover") || r.GetHostKey() != "" {
		t.Fatalf("result = %v", r)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "overlap")); err == nil {
		t.Fatalf("runs overlapped: %s", b)
	}
	if n := countLines(t, filepath.Join(dir, "runs")); n != 2 {
		t.Fatalf("the hook ran %d times, want 2 (the interrupted run and one re-run)", n)
	}
	if got := metricstest.Sum(t, other.reg, "nodesmith_hook_runs_total", map[string]string{"result": "succeeded"}); got != 1 {
		t.Errorf("runs_total{result=succeeded} on %s = %v, want 1", other.id, got)
	}
}

func hookConsumerInfo(t *testing.T, js jetstream.JetStream) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, messaging.CommandStream, messaging.ConsumerHookRunner)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// consumerAcked reports whether the hook command was acked: with work-queue
// retention it is then deleted, so the stream holds no hook command.
func consumerAcked(t *testing.T, js jetstream.JetStream) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, messaging.CommandStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(messaging.SubjectHookCommands+".>"))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs == 0
}

func TestResultsOfFailedAndInvalidHooks(t *testing.T) {
	if testing.Short() {
		t.Skip("component test: NATS and sshd")
	}
	env := natstest.Start(t)
	_, observer := env.ConnectAdmin(t) // reads the results no service but lifecycle may
	srv := sshdtest.Start(t, sshdtest.Options{})
	startReplica(t, env, srv, "runner-1", func(c *service.Config) { c.SSH.TrustOnFirstUse = true; c.SSH.KnownHostsFiles = nil })

	publishHook(t, env.JS, &hookv1.RunHook{InstanceId: "ins-exit", Attempt: 2, Hook: hookv1.HookKind_HOOK_KIND_BEFORE_DELETE,
		Host: "127.0.0.1", Script: "echo draining; exit 3"})
	publishHook(t, env.JS, &hookv1.RunHook{InstanceId: "ins-nohost", Attempt: 1, Hook: hookv1.HookKind_HOOK_KIND_AFTER_CREATED,
		Script: "echo never"})
	publishHook(t, env.JS, &hookv1.RunHook{InstanceId: "ins-skip", Attempt: 1, Hook: hookv1.HookKind_HOOK_KIND_AFTER_CREATED,
		Host: "127.0.0.1"})
	// Not a RunHook at all: terminated, no result.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := env.JS.Publish(ctx, messaging.SubjectHookRun, []byte{0xff, 0x01}); err != nil {
		t.Fatal(err)
	}

	waitFor(t, "three results", func() bool { return len(results(t, observer)) == 3 })
	byInstance := map[string]*hookv1.HookResult{}
	for _, r := range results(t, observer) {
		byInstance[r.GetInstanceId()] = r
	}
	if r := byInstance["ins-exit"]; r == nil || r.GetSucceeded() || r.GetExitCode() != 3 || !r.GetRetryable() ||
		r.GetOutputTail() != "draining\n" || r.GetHostKey() != srv.AuthorizedKey() || r.GetAttempt() != 2 || r.GetRunner() != "runner-1" {
		t.Errorf("exit result = %v", r)
	}
	if r := byInstance["ins-nohost"]; r == nil || r.GetSucceeded() || r.GetRetryable() || r.GetExitCode() != -1 || !strings.Contains(r.GetError(), "no host") {
		t.Errorf("no-host result = %v", r)
	}
	if r := byInstance["ins-skip"]; r == nil || !r.GetSucceeded() || !r.GetSkipped() {
		t.Errorf("skipped result = %v", r)
	}
	waitFor(t, "every command acked or terminated", func() bool { return consumerAcked(t, env.JS) })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 90*time.Second, what, cond)
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func readPIDs(t *testing.T, path string) []int {
	t.Helper()
	var pids []int
	waitFor(t, "pid file "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			p, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("pid file %s: %v", path, err)
			}
			pids = append(pids, p)
		}
		return len(pids) > 0
	})
	return pids
}

// processAlive reports whether pid runs (zombies count as gone).
func processAlive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// TestPasswordLoginEndToEnd runs a hook with password authentication (the
// password given as NODESMITH_SSH_PASSWORD) against OpenSSH's sshd, as the
// throwaway account sshdtest creates; skipped unless run as root.
func TestPasswordLoginEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("component test: NATS and sshd")
	}
	env := natstest.Start(t)
	_, observer := env.ConnectAdmin(t) // reads the results no service but lifecycle may
	srv := sshdtest.Start(t, sshdtest.Options{Password: true})
	startReplica(t, env, srv, "runner-pw", func(c *service.Config) {
		c.SSH.User = srv.PasswordUser
		c.SSH.KeyFile = ""
		c.ReadSecretEnv(func(name string) (string, bool) {
			if name == service.EnvSSHPassword {
				return srv.Password, true
			}
			return "", false
		})
	})
	publishHook(t, env.JS, &hookv1.RunHook{InstanceId: "ins-pw", Attempt: 1, Hook: hookv1.HookKind_HOOK_KIND_AFTER_CREATED,
		Host: "127.0.0.1", Script: "id -un\necho \"node $NODE_NAME\"\nexit 5", Env: map[string]string{"NODE_NAME": "node-pw"}})
	waitFor(t, "the hook result", func() bool { return len(results(t, observer)) == 1 })
	r := results(t, observer)[0]
	if r.GetSucceeded() || r.GetExitCode() != 5 || !r.GetRetryable() || r.GetOutputTail() != srv.PasswordUser+"\nnode node-pw\n" {
		t.Fatalf("result = %v, want exit 5 with the account name and the node name as output", r)
	}
	if !strings.Contains(srv.Logs(), "Accepted password for "+srv.PasswordUser) {
		t.Fatalf("sshd did not log a password login; log:\n%s", srv.Logs())
	}
}
