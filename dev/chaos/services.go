package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// svc is one service replica run as its own OS process, restartable with
// the same flags (and so the same addresses).
type svc struct {
	name string
	bin  string
	args []string
	// env is added to the harness's environment.
	env     []string
	logFile string
	// metrics is its /metrics URL ("" when it serves none).
	metrics string

	mu       sync.Mutex
	p        *harness.Process
	kills    int
	restarts int
	// crashes counts exits nobody asked for.
	crashes int
}

func (s *svc) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := harness.StartProcess(s.name, s.bin, s.args, s.env, s.logFile)
	if err != nil {
		return err
	}
	s.p = p
	return nil
}

// kill9 kills the process with SIGKILL: no shutdown, no drain, in-flight
// work abandoned, exactly like an OOM kill or a node failure.
func (s *svc) kill9() {
	s.mu.Lock()
	p := s.p
	s.p = nil // down on purpose: not an unexpected exit
	s.kills++
	s.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

func (s *svc) restart() error {
	s.mu.Lock()
	s.restarts++
	s.mu.Unlock()
	return s.start()
}

// stop ends the process gracefully (SIGTERM).
func (s *svc) stop() error {
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Stop(30 * time.Second)
}

// maxCrashes is how many unplanned exits of one replica the run tolerates
// (restarting it each time, as kubelet restarts a crashed container).
const maxCrashes = 5

// supervise restarts the replica if it exited on its own, as kubelet
// would restart a crashed container, and records why (the tail of its
// log). It fails only when the replica keeps crashing.
func (s *svc) supervise(r *run) error {
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	err := p.ExitedError(s.logFile)
	if err == nil {
		return nil
	}
	s.mu.Lock()
	s.crashes++
	n := s.crashes
	s.p = nil
	s.mu.Unlock()
	r.recordCrash(s.name, err, lastLines(s.logFile, 2))
	if n > maxCrashes {
		return fmt.Errorf("%s crashed %d times: %w", s.name, n, err)
	}
	return s.start()
}

// lastLines returns the last n lines of a file.
func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// services builds the argument lists of every replica.
func (r *run) services(ctx context.Context) error {
	bins, err := harness.BuildServices(ctx, filepath.Join(r.dir, "bin"), harness.Services...)
	if err != nil {
		return err
	}
	// Lifecycle ensures the topology with these; the workers compare
	// their consumer's ack wait with theirs: they must agree.
	js := []string{"--js-cloud-ack-wait", ackWait.String(), "--js-hook-ack-wait", ackWait.String()}
	var natsErr error
	common := func(name string) []string {
		// Each replica connects with its service's NATS identity.
		natsArgs, err := r.w.ServiceArgs(name)
		if err != nil {
			natsErr = err
		}
		return append(append(natsArgs, "--log-format", "text", "--log-level", "info"), js...)
	}
	addr := harness.FreeAddr
	logf := func(name string) string { return filepath.Join(r.dir, "logs", name+".log") }

	replicas, cluster := 1, []string{"--cluster=none"}
	if r.cfg.kubernetes {
		replicas = 2
		cluster = []string{"--cluster=kubernetes", "--kubeconfig", r.kube.lifecycleKubeconfig, "--namespace", kubeNamespace,
			"--leader-elect", "--lease-name", leaseName, "--leader-elect-lease-duration", leaseDuration.String(),
			"--leader-elect-renew-deadline", renewDeadline.String(), "--leader-elect-retry-period", retryPeriod.String(),
			"--join-timeout", "60s"}
	}
	for i := range replicas {
		name := "lifecycle-" + strconv.Itoa(i)
		lcAddr, err := addr()
		if err != nil {
			return err
		}
		args := append(common(name),
			"--config-file", r.configFile, "--cluster-id", "chaos", "--health-addr", lcAddr, "--secrets-key-file", r.w.SecretsKeyFile,
			"--launch-timeout", r.cfg.launchTimeout.String(), "--after-created-hook-timeout", "60s",
			"--before-delete-hook-timeout", "60s", "--terminate-timeout", "60s",
			"--max-retries", "3", "--retry-backoff", "1s", "--retry-backoff-max", "4s",
			"--reconcile-interval", r.cfg.reconcile.String(), "--orphan-grace", r.cfg.orphanGrace.String(),
			"--op-timeout", "10s", "--shutdown-grace", "5s",
		)
		// POD_NAME and no --leader-elect-identity: each start gets a new
		// identity ("lifecycle-N_<random>"), so a restarted leader cannot
		// resume its own Lease and the other replica has to take over.
		r.lifecycles = append(r.lifecycles, &svc{name: name, bin: bins["lifecycle"], logFile: logf(name), metrics: "http://" + lcAddr + "/metrics",
			args: append(args, cluster...), env: []string{"POD_NAME=" + name}})
	}
	if r.gwAddr, err = addr(); err != nil {
		return err
	}
	if r.restAddr, err = addr(); err != nil {
		return err
	}
	tokenFile := filepath.Join(r.dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte(adminToken+"\n"), 0o600); err != nil {
		return err
	}
	r.gateway = &svc{name: "api-gateway", bin: bins["api-gateway"], logFile: logf("api-gateway"),
		args: append(common("api-gateway"), "--grpc-addr", r.gwAddr, "--grpc-insecure", "--rest-addr", r.restAddr, "--rest-insecure",
			"--rest-admin-token-file", tokenFile, "--health-addr=")}
	// cloud-adapter-0 reaches the emulator's CVM API through a Hold, so a
	// fault can hold one of its RunInstances answers and kill it right
	// then; both reach the ECS API directly.
	holdEndpoint, err := r.startCloudHold()
	if err != nil {
		return err
	}
	for i := range 2 {
		name := "cloud-adapter-" + strconv.Itoa(i)
		endpoint := r.w.Emulator.Endpoint()
		if i == 0 {
			endpoint = holdEndpoint
		}
		r.cloud = append(r.cloud, &svc{name: name, bin: bins["cloud-adapter"], logFile: logf(name),
			args: append(common(name), "--health-addr=", "--tencent-endpoint", endpoint, "--tencent-scheme", "http",
				"--alibaba-endpoint", r.w.ECSEndpoint, "--alibaba-scheme", "http",
				"--credentials-dir", r.w.CredentialsDir, "--watch-poll-interval", "1s", "--heartbeat", "3s", "--shutdown-grace", "5s",
				"--watch-not-found-grace", "10s")})
	}
	for i := range 2 {
		name := "hook-runner-" + strconv.Itoa(i)
		a, err := addr()
		if err != nil {
			return err
		}
		r.hooks = append(r.hooks, &svc{name: name, bin: bins["hook-runner"], logFile: logf(name), metrics: "http://" + a + "/metrics",
			args: append(common(name), "--health-addr", a, "--runner-id", name, "--concurrency", "20",
				"--ssh-key-file", r.w.ClientKeyFile, "--ssh-known-hosts", r.w.KnownHosts, "--ssh-port", strconv.Itoa(r.w.SSHPort),
				"--ssh-connect-timeout", "3s", "--shutdown-grace", "5s", "--secrets-key-file", r.w.SecretsKeyFile)})
	}
	return natsErr
}

// ackWait is every command consumer's ack wait (--js-*-ack-wait): how long
// the commands of a killed replica wait before another replica gets them.
const ackWait = 10 * time.Second

// startCloudHold serves the emulator through a cvmemu.Hold on a port of
// its own and returns its host:port; stopCloudHold ends it.
func (r *run) startCloudHold() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	r.cloudHold = cvmemu.NewHold(r.w.Emulator)
	r.holdServer = &http.Server{Handler: r.cloudHold, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := r.holdServer.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.logf("emulator hold server: %v", err)
		}
	}()
	return ln.Addr().String(), nil
}

func (r *run) stopCloudHold() {
	if r.holdServer == nil {
		return
	}
	r.cloudHold.ReleaseAll()
	_ = r.holdServer.Close()
}

func (r *run) all() []*svc {
	out := append([]*svc{}, r.lifecycles...)
	out = append(out, r.gateway)
	out = append(out, r.cloud...)
	return append(out, r.hooks...)
}

// startAll starts every replica and waits for the gateway to serve.
func (r *run) startAll(ctx context.Context) error {
	for _, s := range r.all() {
		if err := s.start(); err != nil {
			return err
		}
	}
	return harness.WaitGRPCServing(ctx, r.gwAddr, 2*time.Minute, func() error { return r.gateway.supervise(r) })
}

// stopAll stops every replica gracefully; a replica that does not stop in
// time is an error worth reporting.
func (r *run) stopAll() []error {
	var errs []error
	for _, s := range r.all() {
		if err := s.stop(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
		}
	}
	return errs
}
