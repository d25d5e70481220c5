package ssh

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/nodesmith/nodesmith/libs/testwait"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/sshdtest"
)

// hangingScript records its shell's and a child's pids, then waits forever.
func hangingScript(dir string) string {
	return fmt.Sprintf(`echo started
sleep 600 &
echo $! > %[1]s/child.pid
sh -c 'echo $PPID' > %[1]s/shell.pid
wait
echo not reached
`, dir)
}

func TestDeadlineKillsRemoteScript(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Options{})
	e := newExecutor(t, srv, nil)
	dir := t.TempDir()
	start := time.Now()
	ex, out := run(t, e, local(hangingScript(dir)), 3*time.Second)
	if ex.Failure != domain.FailureTimeout || ex.ExitCode != -1 || !ex.Failure.Retryable() {
		t.Fatalf("failure %s exit %d (%v), want timeout with exit -1", ex.Failure, ex.ExitCode, ex.Err)
	}
	if took := time.Since(start); took > time.Minute {
		t.Fatalf("Run returned %v after a 3s deadline", took)
	}
	if out.Stdout() != "started\n" {
		t.Errorf("stdout %q", out.Stdout())
	}
	waitGone(t, readPID(t, filepath.Join(dir, "shell.pid")), readPID(t, filepath.Join(dir, "child.pid")))
}

func TestCancelKillsRemoteScript(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Options{})
	e := newExecutor(t, srv, nil)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan domain.Execution, 1)
	go func() { done <- e.Run(ctx, local(hangingScript(dir)), io.Discard, io.Discard) }()
	shell, child := readPID(t, filepath.Join(dir, "shell.pid")), readPID(t, filepath.Join(dir, "child.pid"))
	cancel()
	ex := <-done
	if ex.Failure != domain.FailureCanceled || ex.ExitCode != -1 {
		t.Fatalf("failure %s exit %d (%v), want canceled", ex.Failure, ex.ExitCode, ex.Err)
	}
	waitGone(t, shell, child)
}

// TestConnectionLossKillsRemoteScript checks the payload's watchdog: when
// the runner vanishes without a word (crash, network cut), sshd closes the
// script's stdin and the watchdog kills the process group, so a re-run by
// another replica never overlaps the first run.
func TestConnectionLossKillsRemoteScript(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Options{})
	signer, err := ssh.ParsePrivateKey([]byte(readFile(t, srv.ClientKeyFile(t, ""))))
	if err != nil {
		t.Fatal(err)
	}
	client, err := ssh.Dial("tcp", srv.Addr(), &ssh.ClientConfig{
		User:            srv.User,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(srv.HostKey),
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sc, err := prepareScript(hangingScript(dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	stdin, _ := sess.StdinPipe()
	if err := sess.Start(sc.command); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdin, sc.payload); err != nil {
		t.Fatal(err)
	}
	shell, child := readPID(t, filepath.Join(dir, "shell.pid")), readPID(t, filepath.Join(dir, "child.pid"))
	if !alive(shell) || !alive(child) {
		t.Fatal("script not running before the connection drops")
	}
	_ = client.Close() // drops TCP: no signal, no channel close
	waitGone(t, shell, child)
}

func TestNormalExitLeavesBackgroundProcesses(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Options{})
	e := newExecutor(t, srv, nil)
	dir := t.TempDir()
	// A hook may start a long-lived process (detached from the session's
	// output, as over plain ssh); the watchdog must not kill it on success.
	script := fmt.Sprintf("sleep 600 </dev/null >/dev/null 2>&1 &\necho $! > %s/daemon.pid\n", dir)
	ex, _ := run(t, e, local(script), time.Minute)
	if ex.Failure != domain.FailureNone {
		t.Fatalf("failure %s (%v)", ex.Failure, ex.Err)
	}
	pid := readPID(t, filepath.Join(dir, "daemon.pid"))
	t.Cleanup(func() { killPID(pid) })
	// The session is closed once Run returns; give sshd's teardown a
	// chance to (wrongly) kill the group before looking.
	ex2, _ := run(t, e, local("true"), time.Minute)
	if ex2.Failure != domain.FailureNone {
		t.Fatalf("second run: %v", ex2.Err)
	}
	if !alive(pid) {
		t.Fatal("background process started by a successful hook was killed")
	}
}

func TestLargeOutputKeepsTail(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Options{})
	e := newExecutor(t, srv, nil)
	const lines = 1400000 // seq 1..1.4M prints about 10 MB
	var want bytes.Buffer
	for i := 1; i <= lines; i++ {
		want.WriteString(strconv.Itoa(i))
		want.WriteByte('\n')
	}
	if want.Len() < 10_000_000 {
		t.Fatalf("test output only %d bytes", want.Len())
	}
	tail := domain.NewTail(domain.OutputTailSize)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ex := e.Run(ctx, local(fmt.Sprintf("seq 1 %d", lines)), tail, tail)
	if ex.Failure != domain.FailureNone {
		t.Fatalf("failure %s (%v)", ex.Failure, ex.Err)
	}
	if tail.Total() != int64(want.Len()) {
		t.Fatalf("streamed %d bytes, want %d", tail.Total(), want.Len())
	}
	got := tail.String()
	if len(got) != domain.OutputTailSize || got != want.String()[want.Len()-domain.OutputTailSize:] {
		t.Fatalf("tail is %d bytes ending %q, want the last %d bytes", len(got), got[max(0, len(got)-20):], domain.OutputTailSize)
	}
}

func TestConnectRetriesUntilSSHDComesUp(t *testing.T) {
	port := sshdtest.FreePort(t)
	logs := &recordingHandler{}
	// The executor needs the server's keys, which exist only once it
	// starts; so start it, stop it, and reuse its files on the same port.
	srv := sshdtest.Start(t, sshdtest.Options{Port: port})
	e := newExecutor(t, srv, func(o *Options) { o.Logger = slog.New(logs) })
	srv.Stop()

	done := make(chan domain.Execution, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		done <- e.Run(ctx, local("echo up"), io.Discard, io.Discard)
	}()
	// Wait until the executor has been refused at least once.
	testwait.Until(t, 30*time.Second, "a refused attempt logged", func() bool { return logs.contains("ssh connection failed, retrying") })
	srv.Restart(t)
	ex := <-done
	if ex.Failure != domain.FailureNone || !ex.Connected || ex.ConnectAttempts < 2 {
		t.Fatalf("failure %s (%v) after %d attempts, want success after retries", ex.Failure, ex.Err, ex.ConnectAttempts)
	}
}

func TestUnreachableHostFailsAtDeadline(t *testing.T) {
	e, err := New(Options{TrustOnFirstUse: true, Password: []byte("x"), RetryInitial: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	cmd := domain.Command{Host: "127.0.0.1", Port: sshdtest.FreePort(t), Script: "true"}
	ex, _ := run(t, e, cmd, 2*time.Second)
	if ex.Failure != domain.FailureConnection || !ex.Failure.Retryable() || ex.Connected || ex.ConnectAttempts < 2 {
		t.Fatalf("failure %s (%v) after %d attempts, want a retryable connection failure after retries", ex.Failure, ex.Err, ex.ConnectAttempts)
	}
	if !strings.Contains(ex.Err.Error(), "deadline") || !strings.Contains(ex.Err.Error(), "refused") {
		t.Fatalf("error %q should name the deadline and the last cause", ex.Err)
	}
}

func TestFiftyHooksInParallel(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: 50 concurrent ssh sessions")
	}
	// Default sshd settings (MaxStartups 10:30:100): concurrent handshakes
	// beyond 10 are randomly dropped, and the retries must absorb that.
	srv := sshdtest.Start(t, sshdtest.Options{})
	e := newExecutor(t, srv, func(o *Options) { o.Logger = slog.New(slog.DiscardHandler) })
	const n = 50
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range n {
		wg.Go(func() {
			cmd := local("sleep 1; echo hook $N")
			cmd.Env = map[string]string{"N": strconv.Itoa(i)}
			ex, out := run(t, e, cmd, 3*time.Minute)
			if ex.Failure != domain.FailureNone || out.Stdout() != fmt.Sprintf("hook %d\n", i) {
				failed.Add(1)
				t.Errorf("hook %d: failure %s (%v) after %d attempts, stdout %q", i, ex.Failure, ex.Err, ex.ConnectAttempts, out.Stdout())
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d of %d parallel hooks failed", failed.Load(), n)
	}
}

// TestKeepaliveDetectsDeadConnection runs a quiet script through a proxy
// that stops forwarding mid-run, like a VM that vanished: keepalives go
// unanswered and the run fails long before its deadline.
func TestKeepaliveDetectsDeadConnection(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Options{})
	proxy := startFreezableProxy(t, srv.Addr())
	e := newExecutor(t, srv, func(o *Options) {
		o.DefaultPort = proxy.port
		o.KeepaliveInterval = 200 * time.Millisecond
		// known_hosts names sshd's port; the proxy has another.
		o.KnownHostsFiles = nil
		o.TrustOnFirstUse = true
	})
	dir := t.TempDir()
	done := make(chan domain.Execution, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		done <- e.Run(ctx, local(hangingScript(dir)), io.Discard, io.Discard)
	}()
	readPID(t, filepath.Join(dir, "shell.pid"))
	proxy.freeze()
	select {
	case ex := <-done:
		if ex.Failure != domain.FailureConnection || !strings.Contains(ex.Err.Error(), "lost") {
			t.Fatalf("failure %s (%v), want connection lost", ex.Failure, ex.Err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("dead connection not detected")
	}
	proxy.close() // sshd now sees the drop; the watchdog cleans up
}

func killPID(pid int) {
	if p, err := findProcess(pid); err == nil {
		_ = p.Kill()
	}
}

type recordingHandler struct {
	mu   sync.Mutex
	msgs []string
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Message)
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }
func (h *recordingHandler) contains(msg string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.msgs {
		if m == msg {
			return true
		}
	}
	return false
}

// freezableProxy forwards TCP to a target until frozen, after which it
// silently drops everything (no FIN, no RST), as a dead peer would.
type freezableProxy struct {
	port   int
	l      net.Listener
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func startFreezableProxy(t *testing.T, target string) *freezableProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezableProxy{port: l.Addr().(*net.TCPAddr).Port, l: l}
	t.Cleanup(p.close)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go p.pipe(u, c)
			go p.pipe(c, u)
		}
	}()
	return p
}

func (p *freezableProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if p.frozen.Load() {
			continue // swallow
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (p *freezableProxy) freeze() { p.frozen.Store(true) }

func (p *freezableProxy) close() {
	_ = p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}
