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

// maxRestarts is how often a container may exit before the test gives up
// on it (the kubelet would keep restarting it: CrashLoopBackOff).
const maxRestarts = 3

// proc is one container's process, restarted when it exits as the kubelet
// does (restartPolicy Always, with a back-off).
type proc struct {
	pod, container string
	log            *lockedBuffer

	mu       sync.Mutex
	cmd      *exec.Cmd
	restarts int
	lastExit error
	stopping bool
	crashed  chan struct{} // closed once it exited more than maxRestarts times
	done     chan struct{} // closed when the supervisor ends
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
// and to memory, restarting it when it exits. It is stopped (SIGTERM, then
// SIGKILL) when the test ends.
func start(t *testing.T, podName, container, bin string, args, env []string, dir, logDir string) *proc {
	t.Helper()
	p := &proc{pod: podName, container: container, log: &lockedBuffer{}, crashed: make(chan struct{}), done: make(chan struct{})}
	f, err := os.Create(filepath.Join(logDir, podName+"_"+container+".log"))
	if err != nil {
		t.Fatal(err)
	}
	out := io.MultiWriter(f, p.log)
	run := func() (*exec.Cmd, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		cmd.Dir = dir
		cmd.Stdout = out
		cmd.Stderr = out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		return cmd, cmd.Start()
	}
	cmd, err := run()
	if err != nil {
		f.Close()
		t.Fatalf("pod %s: starting %s: %v", podName, bin, err)
	}
	p.cmd = cmd
	go func() {
		defer close(p.done)
		defer f.Close()
		for {
			err := cmd.Wait()
			p.mu.Lock()
			if p.stopping {
				p.mu.Unlock()
				return
			}
			p.restarts++
			p.lastExit = err
			n := p.restarts
			p.mu.Unlock()
			if n > maxRestarts {
				close(p.crashed)
				return
			}
			time.Sleep(min(10*time.Second, time.Second<<(n-1)))
			fmt.Fprintf(out, "--- manifestrun: container exited (%v); restart %d, as the kubelet would ---\n", err, n)
			p.mu.Lock()
			if p.stopping {
				p.mu.Unlock()
				return
			}
			if cmd, err = run(); err != nil {
				p.mu.Unlock()
				close(p.crashed)
				return
			}
			p.cmd = cmd
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *proc) stop() {
	p.mu.Lock()
	p.stopping = true
	cmd := p.cmd
	p.mu.Unlock()
	select {
	case <-p.done:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// running reports an error once the container is crash-looping.
func (p *proc) running() error {
	select {
	case <-p.crashed:
		p.mu.Lock()
		defer p.mu.Unlock()
		return fmt.Errorf("pod %s container %s keeps exiting (%d times, last: %w); its log:\n%s", p.pod, p.container, p.restarts, p.lastExit, tail(p.log.String(), 6000))
	default:
		return nil
	}
}

// restartCount is how often the container exited and was restarted.
func (p *proc) restartCount() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts, p.lastExit
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
