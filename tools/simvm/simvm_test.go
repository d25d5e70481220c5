package simvm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// testTimeout bounds every wait in these tests; they poll rather than sleep.
const testTimeout = 20 * time.Second

type env struct {
	t          *testing.T
	factory    *Factory
	client     ssh.Signer
	ca         ssh.Signer
	knownHosts string
}

func newEnv(t *testing.T, mod func(*Config)) *env {
	t.Helper()
	client, err := GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	ca, err := GenerateHostCA()
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Port = testPort
	cfg.Root = t.TempDir()
	cfg.AuthorizedKeys = []ssh.PublicKey{client.PublicKey()}
	cfg.HostCA = ca
	cfg.OrphanGrace = 200 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	f, err := NewFactory(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("factory close: %v", err)
		}
	})
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := WriteKnownHostsCA(kh, ca.PublicKey(), cfg.Port); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, factory: f, client: client, ca: ca, knownHosts: kh}
}

// testPort is a fixed, non-22 port so the known_hosts pattern handling for
// Go clients is exercised; addresses come from a per-process random range
// and are skipped when taken, so concurrent test runs do not collide.
const testPort = 2222

var nextIP atomic.Uint32

func init() { nextIP.Store(uint32(rand.IntN(200)) << 8) }

func testIP() string {
	n := nextIP.Add(1)
	return fmt.Sprintf("127.78.%d.%d", (n>>8)%256, n%254+1)
}

func (e *env) startVM(spec VMSpec) *VM {
	e.t.Helper()
	pickIP := spec.IP == ""
	for attempt := 0; ; attempt++ {
		if pickIP {
			spec.IP = testIP()
		}
		s := spec
		if s.ID == "" {
			s.ID = "ins-" + strings.ReplaceAll(s.IP, ".", "")
		}
		vm, err := e.factory.Start(s)
		if pickIP && errors.Is(err, syscall.EADDRINUSE) && attempt < 100 {
			continue
		}
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { _ = vm.Close() })
		return vm
	}
}

func (e *env) dial(vm *VM) *ssh.Client {
	e.t.Helper()
	cb, err := knownhosts.New(e.knownHosts)
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := ssh.Dial("tcp", vm.Addr(), &ssh.ClientConfig{
		User:            "root",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(e.client)},
		HostKeyCallback: cb,
		Timeout:         testTimeout,
	})
	if err != nil {
		e.t.Fatalf("dial %s: %v", vm.Addr(), err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// run executes cmd with stdin and returns stdout, stderr and the exit status.
func run(t *testing.T, c *ssh.Client, cmd, stdin string) (string, string, int) {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out, errb bytes.Buffer
	s.Stdout, s.Stderr = &out, &errb
	s.Stdin = strings.NewReader(stdin)
	err = s.Run(cmd)
	var ee *ssh.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitStatus()
	default:
		t.Fatalf("run %q: %v (stderr %q)", cmd, err, errb.String())
		return "", "", 0
	}
}

func TestExecOutputAndExitStatus(t *testing.T) {
	e := newEnv(t, nil)
	vm := e.startVM(VMSpec{Env: map[string]string{"GREETING": "hi"}})
	c := e.dial(vm)

	out, errOut, code := run(t, c, `echo "$GREETING $(pwd)"; echo oops >&2; exit 3`, "")
	if code != 3 {
		t.Errorf("exit status = %d, want 3", code)
	}
	if want := "hi " + vm.Sandbox() + "\n"; out != want {
		t.Errorf("stdout = %q, want %q", out, want)
	}
	if errOut != "oops\n" {
		t.Errorf("stderr = %q", errOut)
	}

	// HOME is the sandbox and the shims come first on PATH.
	out, _, _ = run(t, c, `echo "$HOME"; command -v kubeadm`, "")
	if want := vm.Sandbox() + "\n" + vm.Sandbox() + "/bin/kubeadm\n"; out != want {
		t.Errorf("got %q, want %q", out, want)
	}

	// Large output is delivered completely before the exit status.
	out, _, code = run(t, c, `i=0; while [ $i -lt 20000 ]; do echo line-$i; i=$((i+1)); done`, "")
	if code != 0 || strings.Count(out, "\n") != 20000 || !strings.HasSuffix(out, "line-19999\n") {
		t.Errorf("large output: code %d, %d lines", code, strings.Count(out, "\n"))
	}

	if h := vm.History(); len(h) != 3 || h[0].ExitStatus != 3 {
		t.Errorf("history = %+v", h)
	}
}

func TestScriptOnStdinJoinsAndResets(t *testing.T) {
	e := newEnv(t, nil)
	var mu sync.Mutex
	var events []string
	vm := e.startVM(VMSpec{
		Env: map[string]string{"PROVIDER_ID": "default-provider"},
		OnJoin: func(id, node, provider string) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, fmt.Sprintf("join %s %s %s", id, node, provider))
		},
		OnReset: func(id, node string) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, fmt.Sprintf("reset %s %s", id, node))
		},
	})
	c := e.dial(vm)

	script := "set -e\nhostnamectl set-hostname n1\nkubeadm join 10.0.0.1:6443 --token abc --node-name n1 --provider-id p1\necho done\n"
	out, errOut, code := run(t, c, "sh -s", script)
	if code != 0 || !strings.Contains(out, "This node has joined the cluster") || !strings.HasSuffix(out, "done\n") {
		t.Fatalf("join script: code %d, out %q, err %q", code, out, errOut)
	}
	if js, ok := vm.Joined(); !ok || js != (JoinState{NodeName: "n1", ProviderID: "p1"}) {
		t.Fatalf("Joined() = %+v, %v", js, ok)
	}
	if vm.Hostname() != "n1" {
		t.Errorf("hostname = %q", vm.Hostname())
	}

	// A second join fails its preflight check, like the real kubeadm.
	_, errOut, code = run(t, c, "kubeadm join x --node-name n1", "")
	if code != 1 || !strings.Contains(errOut, "kubelet.conf already exists") {
		t.Errorf("re-join: code %d, stderr %q", code, errOut)
	}

	if _, _, code := run(t, c, "kubectl drain n1 --ignore-daemonsets && kubeadm reset -f", ""); code != 0 {
		t.Fatalf("reset: code %d", code)
	}
	// Joining again with defaults from the environment.
	if _, errOut, code := run(t, c, "NODE_NAME=n2 kubeadm join x", ""); code != 0 {
		t.Fatalf("join with env defaults: code %d, %s", code, errOut)
	}

	mu.Lock()
	defer mu.Unlock()
	id := vm.ID()
	want := []string{"join " + id + " n1 p1", "reset " + id + " n1", "join " + id + " n2 default-provider"}
	if fmt.Sprint(events) != fmt.Sprint(want) {
		t.Errorf("events = %q\nwant     %q", events, want)
	}
	b, err := os.ReadFile(filepath.Join(vm.Sandbox(), LogDir, "kubectl.log"))
	if err != nil || !strings.Contains(string(b), "kubectl drain n1 --ignore-daemonsets") {
		t.Errorf("kubectl log = %q, %v", b, err)
	}
}

func TestKubeadmRejectsBadNodeName(t *testing.T) {
	e := newEnv(t, nil)
	vm := e.startVM(VMSpec{})
	c := e.dial(vm)
	for _, args := range []string{"", "--node-name Bad_Name", "--node-name"} {
		if _, _, code := run(t, c, "kubeadm join x "+args, ""); code == 0 {
			t.Errorf("kubeadm join %q succeeded", args)
		}
	}
	if _, ok := vm.Joined(); ok {
		t.Error("VM joined despite errors")
	}
}

func TestEnvRequests(t *testing.T) {
	e := newEnv(t, nil)
	c := e.dial(e.startVM(VMSpec{}))
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Setenv("NODE_NAME", "from-client"); err != nil {
		t.Fatalf("Setenv: %v", err)
	}
	if err := s.Setenv("PATH", "/nowhere"); err == nil {
		t.Error("overriding PATH must be refused")
	}
	out, err := s.Output(`echo "$NODE_NAME"; command -v kubeadm >/dev/null && echo shims-ok`)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "from-client\nshims-ok\n" {
		t.Errorf("out = %q", out)
	}
}

func TestShellAndPTYRefused(t *testing.T) {
	e := newEnv(t, nil)
	c := e.dial(e.startVM(VMSpec{}))
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.RequestPty("xterm", 40, 80, nil); err == nil {
		t.Error("pty-req must be refused")
	}
	if err := s.Shell(); err == nil {
		t.Error("shell must be refused")
	}
}

func TestHostCertificateVerification(t *testing.T) {
	e := newEnv(t, nil)
	vm := e.startVM(VMSpec{})

	// Trusted CA: e.dial already verifies via @cert-authority.
	e.dial(vm)

	// A known_hosts that trusts another CA must reject the VM.
	other, err := GenerateHostCA()
	if err != nil {
		t.Fatal(err)
	}
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := WriteKnownHostsCA(kh, other.PublicKey(), testPort); err != nil {
		t.Fatal(err)
	}
	cb, err := knownhosts.New(kh)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ssh.Dial("tcp", vm.Addr(), &ssh.ClientConfig{
		User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(e.client)}, HostKeyCallback: cb, Timeout: testTimeout,
	})
	if err == nil {
		t.Fatal("dial succeeded with an untrusted host CA")
	}

	// Without a CA the plain host key is still offered and can be pinned.
	_, err = ssh.Dial("tcp", vm.Addr(), &ssh.ClientConfig{
		User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(e.client)},
		HostKeyCallback:   ssh.FixedHostKey(vm.HostKey()),
		HostKeyAlgorithms: []string{ssh.KeyAlgoED25519},
		Timeout:           testTimeout,
	})
	if err != nil {
		t.Fatalf("dial with pinned plain host key: %v", err)
	}
	if line := KnownHostsCALine(e.ca.PublicKey()); !strings.HasPrefix(line, "@cert-authority * ssh-ed25519 ") {
		t.Errorf("CA line = %q", line)
	}
	if line := KnownHostsCALine(e.ca.PublicKey(), 22, 2222); !strings.HasPrefix(line, "@cert-authority *,[*]:2222 ssh-ed25519 ") {
		t.Errorf("CA line = %q", line)
	}
}

func TestAuthentication(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Password = "s3cret" })
	vm := e.startVM(VMSpec{})
	stranger, err := GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	try := func(user string, auth ssh.AuthMethod) error {
		c, err := ssh.Dial("tcp", vm.Addr(), &ssh.ClientConfig{
			User: user, Auth: []ssh.AuthMethod{auth}, HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: testTimeout,
		})
		if err == nil {
			_ = c.Close()
		}
		return err
	}
	if err := try("root", ssh.PublicKeys(stranger)); err == nil {
		t.Error("unknown key accepted")
	}
	if err := try("admin", ssh.PublicKeys(e.client)); err == nil {
		t.Error("wrong user accepted")
	}
	if err := try("root", ssh.Password("wrong")); err == nil {
		t.Error("wrong password accepted")
	}
	if err := try("root", ssh.Password("s3cret")); err != nil {
		t.Errorf("password login: %v", err)
	}
	if _, err := NewFactory(Config{}); err == nil {
		t.Error("NewFactory without any credential must fail")
	}
}

// processGone reports whether pid no longer runs (absent or a zombie: in a
// container the reaper may be slow or missing).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// Format: pid (comm) state ...; comm may contain spaces, so cut at ')'.
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] == 'Z'
}

func waitGone(t *testing.T, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for _, pid := range pids {
		for !processGone(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still running", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// startLongCommand starts cmd (which must print the PIDs to watch, one per
// line, then "ready") and returns the session and those PIDs.
func startLongCommand(t *testing.T, c *ssh.Client, cmd string) (*ssh.Session, []int) {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := s.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(cmd); err != nil {
		t.Fatal(err)
	}
	var pids []int
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if sc.Text() == "ready" {
			go func() { // keep draining so the command never blocks on output
				for sc.Scan() {
				}
			}()
			return s, pids
		}
		pid, err := strconv.Atoi(sc.Text())
		if err != nil {
			t.Fatalf("unexpected output %q", sc.Text())
		}
		pids = append(pids, pid)
	}
	t.Fatalf("command ended before ready: %v", sc.Err())
	return nil, nil
}

func TestDisconnectKillsProcessGroup(t *testing.T) {
	e := newEnv(t, nil)
	vm := e.startVM(VMSpec{})
	c := e.dial(vm)
	_, pids := startLongCommand(t, c, `sleep 300 & echo $!; echo $$; echo ready; wait`)
	if err := c.Close(); err != nil { // the client vanishes mid-command
		t.Fatal(err)
	}
	waitGone(t, pids...)
	deadline := time.Now().Add(testTimeout)
	for vm.ActiveSessions() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("session not cleaned up")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestChannelCloseKillsProcess(t *testing.T) {
	e := newEnv(t, nil)
	c := e.dial(e.startVM(VMSpec{}))
	s, pids := startLongCommand(t, c, `sleep 300 & echo $!; echo ready; wait`)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pids...)
	// The connection stays usable.
	if out, _, code := run(t, c, "echo still-here", ""); code != 0 || out != "still-here\n" {
		t.Errorf("after close: %q %d", out, code)
	}
}

func TestSignalsAndExitSignal(t *testing.T) {
	e := newEnv(t, nil)
	c := e.dial(e.startVM(VMSpec{}))

	// A "signal" request reaches the process group; the trap decides the status.
	s, _ := startLongCommand(t, c, `trap 'exit 7' TERM; echo ready; sleep 300 & wait`)
	if err := s.Signal(ssh.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := s.Wait()
	var ee *ssh.ExitError
	if !errors.As(err, &ee) || ee.ExitStatus() != 7 {
		t.Fatalf("after SIGTERM: %v, want exit 7", err)
	}

	// A command killed by a signal reports exit-signal, like sshd.
	s2, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	err = s2.Run(`kill -KILL $$`)
	if !errors.As(err, &ee) || ee.Signal() != "KILL" {
		t.Fatalf("self-kill: %v, want exit-signal KILL", err)
	}
}

func TestBackgroundLeftoversAreKilledAtExit(t *testing.T) {
	e := newEnv(t, nil)
	vm := e.startVM(VMSpec{})
	c := e.dial(vm)
	// The background job keeps stdout open: the session must still end
	// (after OrphanGrace) and the job must not survive it.
	out, _, code := run(t, c, `sleep 300 & echo $! > bg.pid; echo started`, "")
	if code != 0 || out != "started\n" {
		t.Fatalf("out %q code %d", out, code)
	}
	b, err := os.ReadFile(filepath.Join(vm.Sandbox(), "bg.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
}

func TestMaxSessions(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxSessions = 1 })
	vm := e.startVM(VMSpec{})
	c := e.dial(vm)
	s, _ := startLongCommand(t, c, `echo ready; sleep 300`)
	if _, err := c.NewSession(); err == nil {
		t.Fatal("second concurrent session must be rejected")
	}
	_ = s.Close()
	deadline := time.Now().Add(testTimeout)
	for {
		s2, err := c.NewSession()
		if err == nil {
			_ = s2.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session slot never freed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestVMCloseStopsServerAndSandbox(t *testing.T) {
	e := newEnv(t, nil)
	vm := e.startVM(VMSpec{})
	c := e.dial(vm)
	_, pids := startLongCommand(t, c, `sleep 300 & echo $!; echo ready; wait`)
	if err := vm.Close(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pids...)
	if _, err := os.Stat(vm.Sandbox()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox still present: %v", err)
	}
	if _, err := ssh.Dial("tcp", vm.Addr(), &ssh.ClientConfig{
		User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(e.client)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 2 * time.Second,
	}); err == nil {
		t.Error("dial succeeded after Close")
	}
	// The same IP can be reused right away.
	vm2 := e.startVM(VMSpec{ID: "reuse", IP: vm.IP()})
	e.dial(vm2)
}

func TestStartValidation(t *testing.T) {
	e := newEnv(t, nil)
	for _, spec := range []VMSpec{{ID: "../evil", IP: "127.78.200.1"}, {ID: "ok", IP: "not-an-ip"}, {ID: "", IP: "127.78.200.1"}} {
		if vm, err := e.factory.Start(spec); err == nil {
			_ = vm.Close()
			t.Errorf("Start(%+v) succeeded", spec)
		}
	}
	vm := e.startVM(VMSpec{})
	// The same address twice: the error must say "address in use".
	if _, err := e.factory.Start(VMSpec{ID: "dup", IP: vm.IP()}); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("duplicate address: err = %v, want EADDRINUSE", err)
	}
}

func TestManyVMsConcurrently(t *testing.T) {
	e := newEnv(t, nil)
	const vms, perVM = 40, 3
	var joins atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, vms*perVM)
	for i := range vms {
		vm := e.startVM(VMSpec{OnJoin: func(string, string, string) { joins.Add(1) }})
		c := e.dial(vm)
		for j := range perVM {
			wg.Go(func() {
				if ctx.Err() != nil {
					return
				}
				s, err := c.NewSession()
				if err != nil {
					errs <- err
					return
				}
				defer s.Close()
				cmd := fmt.Sprintf("echo %d-%d", i, j)
				if j == 0 {
					cmd = fmt.Sprintf("kubeadm join x --node-name node-%d >/dev/null && echo %d-%d", i, i, j)
				}
				out, err := s.Output(cmd)
				if err != nil || string(out) != fmt.Sprintf("%d-%d\n", i, j) {
					errs <- fmt.Errorf("vm %d session %d: %q: %w", i, j, out, err)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := joins.Load(); got != vms {
		t.Errorf("joins = %d, want %d", got, vms)
	}
}
