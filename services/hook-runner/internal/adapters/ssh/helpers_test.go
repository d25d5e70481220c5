package ssh

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/sshdtest"
)

// testLogger sends logs to the test log at debug level.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// newExecutor returns an executor for srv with key auth and srv's plain
// host key in known_hosts; mutate adjusts the options.
func newExecutor(t *testing.T, srv *sshdtest.Server, mutate func(*Options)) *Executor {
	t.Helper()
	o := Options{
		User:            srv.User,
		KeyFile:         srv.ClientKeyFile(t, ""),
		KnownHostsFiles: []string{sshdtest.WriteFile(t, "known_hosts", srv.KnownHostsLine()+"\n")},
		DefaultPort:     srv.Port,
		RetryInitial:    50 * time.Millisecond,
		RetryMax:        500 * time.Millisecond,
		Logger:          testLogger(t),
	}
	if mutate != nil {
		mutate(&o)
	}
	e, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

type output struct {
	mu             sync.Mutex
	stdout, stderr bytes.Buffer
}

func (o *output) writers() (io.Writer, io.Writer) {
	return lockedWriter{&o.mu, &o.stdout}, lockedWriter{&o.mu, &o.stderr}
}

func (o *output) Stdout() string { o.mu.Lock(); defer o.mu.Unlock(); return o.stdout.String() }
func (o *output) Stderr() string { o.mu.Lock(); defer o.mu.Unlock(); return o.stderr.String() }

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// run runs script on srv with a timeout and returns the execution and output.
func run(t *testing.T, e *Executor, cmd domain.Command, timeout time.Duration) (domain.Execution, *output) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out := &output{}
	stdout, stderr := out.writers()
	ex := e.Run(ctx, cmd, stdout, stderr)
	return ex, out
}

func local(script string) domain.Command {
	return domain.Command{Host: "127.0.0.1", Script: script}
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// readPID waits for a script to write its pid file.
func readPID(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(path)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("pid file %s: %v", path, err)
			}
			return pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("pid file %s never appeared", path)
	return 0
}

// waitGone polls until none of pids is running.
func waitGone(t *testing.T, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		any := false
		for _, p := range pids {
			if alive(p) {
				any = true
			}
		}
		if !any {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range pids {
		if alive(p) {
			t.Errorf("process %d still running", p)
		}
	}
	t.FailNow()
}

func writeFileAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func findProcess(pid int) (*os.Process, error) { return os.FindProcess(pid) }
