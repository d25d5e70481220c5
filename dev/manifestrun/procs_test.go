package manifestrun

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// buildBinaries builds every service (services/<name>/cmd/<name>) and
// nats-server (the version the dev module pins, the one the nats image
// of the manifests ships) into dir, without the race detector: these are
// the binaries under test, not the test.
func buildBinaries(t *testing.T, repo, dir string) map[string]string {
	t.Helper()
	bins := map[string]string{}
	type job struct{ name, moduleDir, pkg string }
	var jobs []job
	entries, err := os.ReadDir(filepath.Join(repo, "services"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		cmds, err := os.ReadDir(filepath.Join(repo, "services", e.Name(), "cmd"))
		if err != nil {
			continue
		}
		for _, c := range cmds {
			jobs = append(jobs, job{c.Name(), filepath.Join(repo, "services", e.Name()), "./cmd/" + c.Name()})
		}
	}
	jobs = append(jobs, job{"nats-server", filepath.Join(repo, "dev"), "github.com/nats-io/nats-server/v2"})
	for _, j := range jobs {
		out := filepath.Join(dir, j.name)
		cmd := exec.Command("go", "build", "-o", out, j.pkg)
		cmd.Dir = j.moduleDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", j.pkg, err, b)
		}
		bins[j.name] = out
	}
	return bins
}

// proc is one container's process.
type proc struct {
	pod, container string
	cmd            *exec.Cmd
	logPath        string
	log            *lockedBuffer
	exited         chan struct{}
	err            error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start runs bin with args and exactly env (nothing of the test's own
// environment), in dir, its output going to logDir/<pod>_<container>.log
// and to memory. It is stopped (SIGTERM, then SIGKILL) when the test ends.
func start(t *testing.T, podName, container, bin string, args, env []string, dir, logDir string) *proc {
	t.Helper()
	p := &proc{pod: podName, container: container, log: &lockedBuffer{}, exited: make(chan struct{})}
	p.logPath = filepath.Join(logDir, podName+"_"+container+".log")
	f, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Dir = dir
	p.cmd.Stdout = io.MultiWriter(f, p.log)
	p.cmd.Stderr = p.cmd.Stdout
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("pod %s: starting %s: %v", podName, bin, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	t.Cleanup(func() { p.stop() })
	return p
}

func (p *proc) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

// running reports an error if the process has exited.
func (p *proc) running() error {
	select {
	case <-p.exited:
		return fmt.Errorf("pod %s container %s exited (%v); its log:\n%s", p.pod, p.container, p.err, tail(p.log.String(), 6000))
	default:
		return nil
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return "...\n" + s
}
