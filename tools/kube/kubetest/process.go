package kubetest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is a child (etcd or kube-apiserver) whose output goes to a log
// file, so a failing test can show what the child said.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	log     *os.File
	done    chan struct{}
	waitErr error
}

func startProcess(name, bin string, args []string, logPath string) (*process, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	// A clean environment: ETCD_* or KUBECONFIG variables of the developer
	// must not change how the children behave.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, log: log, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		_ = log.Close()
		close(p.done)
	}()
	return p, nil
}

// exited is closed when the process has ended.
func (p *process) exited() <-chan struct{} { return p.done }

// exitError describes how the process ended (valid after exited).
func (p *process) exitError() error {
	if p.waitErr == nil {
		return fmt.Errorf("%s exited", p.name)
	}
	return fmt.Errorf("%s exited: %w", p.name, p.waitErr)
}

// stop asks the process to terminate and kills it after grace. The
// whole process group goes, in case the child forked.
func (p *process) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	signal := func(sig syscall.Signal) {
		if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			_ = p.cmd.Process.Signal(sig)
		}
	}
	signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		signal(syscall.SIGKILL)
		<-p.done
	}
}

// logTail returns the last n bytes of the process's output.
func (p *process) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", p.logPath, err)
	}
	return tail(strings.TrimSpace(string(b)), n)
}
