package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
)

// Services are the four service commands, by name.
var Services = []string{"lifecycle", "api-gateway", "cloud-adapter", "hook-runner"}

// RepoRoot returns the root of the nodesmith workspace (where go.work is).
func RepoRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOWORK").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOWORK: %w", err)
	}
	gowork := strings.TrimSpace(string(out))
	if gowork == "" || gowork == "off" {
		return "", errors.New("not inside the nodesmith workspace (go env GOWORK is empty): run from the repository")
	}
	return filepath.Dir(gowork), nil
}

// BuildServices builds the named service commands (services/<name>/cmd/<name>)
// into dir and returns their paths by name.
func BuildServices(ctx context.Context, dir string, names ...string) (map[string]string, error) {
	root, err := RepoRoot(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, n := range names {
		bin := filepath.Join(dir, n)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/"+n)
		cmd.Dir = filepath.Join(root, "services", n)
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building %s: %w\n%s", n, err, b)
		}
		out[n] = bin
	}
	return out, nil
}

// Process is a service running as its own OS process.
type Process struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  *os.File
}

// StartProcess starts bin with args; its output goes to logFile.
func StartProcess(name, bin string, args, env []string, logFile string) (*Process, error) {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group: a signal to us (Ctrl-C) is not delivered to
	// it twice, and kill -9 hits only it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, cmd: cmd, done: make(chan struct{}), log: f}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Kill sends SIGKILL (kill -9) and waits for the process to be gone.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits up to grace before killing it.
func (p *Process) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		var ee *exec.ExitError
		if errors.As(p.err, &ee) && ee.ExitCode() != 0 {
			return fmt.Errorf("%s exited with %d after SIGTERM", p.Name, ee.ExitCode())
		}
		return nil
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("%s did not stop within %s of SIGTERM; killed", p.Name, grace)
	}
}

// Memory is a process's resident memory as /proc/<pid>/status reports it.
type Memory struct {
	// RSSKiB is the current resident set (VmRSS); HWMKiB its peak (VmHWM).
	RSSKiB, HWMKiB int
}

// Memory reads /proc/<pid>/status.
func (p *Process) Memory() (Memory, error) { return ReadMemory(p.Pid()) }

// ReadMemory reads the resident memory of pid.
func ReadMemory(pid int) (Memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, err
	}
	var m Memory
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		switch k {
		case "VmRSS":
			m.RSSKiB = n
		case "VmHWM":
			m.HWMKiB = n
		}
	}
	if m.RSSKiB == 0 {
		return m, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return m, nil
}

// FreeAddr returns a loopback address with a port free right now.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// WaitGRPCServing polls the gRPC health service at addr until it reports
// SERVING (the gateway does once its read model has loaded).
func WaitGRPCServing(ctx context.Context, addr string, timeout time.Duration, alive func() error) error {
	conn, err := dialEager(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	hc := grpc_health_v1.NewHealthClient(conn)
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		res, err := hc.Check(cctx, &grpc_health_v1.HealthCheckRequest{})
		cancel()
		if err == nil && res.GetStatus() == grpc_health_v1.HealthCheckResponse_SERVING {
			return nil
		}
		if alive != nil {
			if aerr := alive(); aerr != nil {
				return aerr
			}
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("status %v", res.GetStatus())
			}
			return fmt.Errorf("%s not SERVING after %s: %w", addr, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// dialEager connects with a short reconnect backoff: gRPC's default (1s
// after a refused connection) would dominate a start-up measured while the
// server is still starting.
func dialEager(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.2, Jitter: 0.1, MaxDelay: 50 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
}

// ExitedError turns an early exit into an error naming the log file.
func (p *Process) ExitedError(logFile string) error {
	if done, err := p.Exited(); done {
		return fmt.Errorf("%s exited early (see %s): %w", p.Name, logFile, err)
	}
	return nil
}

// WaitGRPCReachable polls until a Refresh call at addr succeeds.
func WaitGRPCReachable(ctx context.Context, addr string, timeout time.Duration, alive func() error) error {
	conn, err := dialEager(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	c := pb.NewCloudProviderClient(conn)
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Refresh(cctx, &pb.RefreshRequest{})
		cancel()
		if err == nil {
			return nil
		}
		if alive != nil {
			if aerr := alive(); aerr != nil {
				return aerr
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not answering after %s: %w", addr, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// clockTicks is the unit of /proc/<pid>/stat's times (USER_HZ), 100 on
// every Linux architecture Go supports here.
const clockTicks = 100

// CPUTime is the CPU time (user and system) the process has used so far.
func (p *Process) CPUTime() (time.Duration, error) { return ReadCPUTime(p.Pid()) }

// ReadCPUTime reads a process's CPU time (user + system, all threads)
// from /proc/<pid>/stat, at its 10ms resolution.
func ReadCPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces;
	// utime and stime are fields 14 and 15, the 12th and 13th after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// WaitNodeGroupNodes polls NodeGroupNodes(group) at addr until it answers
// exactly want (provider ids, sorted) and returns the time from since.
func WaitNodeGroupNodes(ctx context.Context, addr, group string, want []string, since time.Time, timeout time.Duration, alive func() error) (time.Duration, error) {
	conn, err := dialEager(addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	c := pb.NewCloudProviderClient(conn)
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := c.NodeGroupNodes(cctx, &pb.NodeGroupNodesRequest{Id: group})
		cancel()
		if err == nil {
			got := make([]string, 0, len(res.GetInstances()))
			for _, in := range res.GetInstances() {
				got = append(got, in.GetId())
			}
			slices.Sort(got)
			if slices.Equal(got, want) {
				return time.Since(since), nil
			}
			err = fmt.Errorf("%d instances, want %d", len(got), len(want))
		}
		if alive != nil {
			if aerr := alive(); aerr != nil {
				return 0, aerr
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("NodeGroupNodes(%s) at %s not right after %s: %w", group, addr, timeout, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
