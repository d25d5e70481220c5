package cvmemu

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/nodesmith/nodesmith/tools/simcluster"
	"github.com/nodesmith/nodesmith/tools/simvm"
)

// sshWorld is an emulator wired to SSH-able VMs and a simulated cluster.
type sshWorld struct {
	srv        *Server
	cluster    *simcluster.Cluster
	clientKey  ssh.Signer
	knownHosts string
}

func newSSHWorld(t *testing.T) *sshWorld {
	t.Helper()
	return newSSHWorldWith(t, Start)
}

// newSSHWorldWith is newSSHWorld with the API of start (Start or StartECS).
func newSSHWorldWith(t *testing.T, start func(string, Config, ...Option) (*Server, error)) *sshWorld {
	t.Helper()
	clientKey, err := simvm.GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	ca, err := simvm.GenerateHostCA()
	if err != nil {
		t.Fatal(err)
	}
	vmCfg := simvm.DefaultConfig() // port 2222, user root
	vmCfg.Root = t.TempDir()
	vmCfg.AuthorizedKeys = []ssh.PublicKey{clientKey.PublicKey()}
	vmCfg.HostCA = ca
	vmCfg.OrphanGrace = 200 * time.Millisecond
	factory, err := simvm.NewFactory(vmCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = factory.Close() })

	cluster := simcluster.New(simcluster.Options{ReadyDelay: 100 * time.Millisecond})
	t.Cleanup(cluster.Close)

	cfg := testConfig()
	// A random /24 per run keeps concurrent test processes apart; the
	// emulator skips addresses that are taken anyway.
	cfg.IPBase = fmt.Sprintf("127.79.%d.1", rand.IntN(250))
	srv := startWith(t, start, cfg, WithSSH(factory), WithCluster(cluster))

	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := simvm.WriteKnownHostsCA(kh, ca.PublicKey(), vmCfg.Port); err != nil {
		t.Fatal(err)
	}
	return &sshWorld{srv: srv, cluster: cluster, clientKey: clientKey, knownHosts: kh}
}

// dial connects the way a hook runner would: to the private IP and default
// login port from DescribeInstances, verifying the host certificate.
func (w *sshWorld) dial(t *testing.T, ip string, port int64) *ssh.Client {
	t.Helper()
	cb, err := knownhosts.New(w.knownHosts)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ssh.Dial("tcp", net.JoinHostPort(ip, strconv.FormatInt(port, 10)), &ssh.ClientConfig{
		User:            "root",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(w.clientKey)},
		HostKeyCallback: cb,
		Timeout:         testTimeout,
	})
	if err != nil {
		t.Fatalf("ssh dial %s:%d: %v", ip, port, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func sshRun(t *testing.T, c *ssh.Client, cmd, stdin string) (stdout, stderr string, status int) {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out, errb bytes.Buffer
	s.Stdout, s.Stderr, s.Stdin = &out, &errb, strings.NewReader(stdin)
	err = s.Run(cmd)
	var ee *ssh.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		status = ee.ExitStatus()
	default:
		t.Fatalf("run %q: %v", cmd, err)
	}
	return out.String(), errb.String(), status
}

// testJoinArgs is the discovery part of a valid kubeadm join on a simulated
// VM: the token and CA certificate hash of its image.
const testJoinArgs = "10.0.0.1:6443 --token " + simvm.DevJoinToken + " --discovery-token-ca-cert-hash " + simvm.DevCACertHash

// joinWithDefaults is what the sample join hook does: the providerID of the
// guest's environment in /etc/default/kubelet, the image's token and hash.
const joinWithDefaults = `set -eu
etc="${SIMVM_SANDBOX:-}/etc"
echo "KUBELET_EXTRA_ARGS=--provider-id=$PROVIDER_ID" > "$etc/default/kubelet"
kubeadm join 10.0.0.1:6443 --token "$(cat "$etc/kubeadm/token")" --discovery-token-ca-cert-hash "$(cat "$etc/kubeadm/ca-cert-hash")"
`

func TestSSHEndToEndJoin(t *testing.T) {
	w := newSSHWorld(t)
	c := sdkClient(t, w.srv, testSecretID, testKey)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	ids, err := runInstances(c, runOpts{count: 2, tags: map[string]string{"nodesmith/pool": "e2e"}})
	if err != nil {
		t.Fatal(err)
	}
	insts := waitState(t, c, ids, StateRunning)
	byID := map[string]string{}
	for _, in := range insts {
		if *in.DefaultLoginPort != 2222 {
			t.Errorf("DefaultLoginPort = %d, want the SSH port 2222", *in.DefaultLoginPort)
		}
		byID[*in.InstanceId] = *in.PrivateIpAddresses[0]
	}
	vm1, vm2 := ids[0], ids[1]
	conn := w.dial(t, byID[vm1], 2222)

	// A hook runner streams its script to "sh -s".
	script := `set -eu
echo "joining from $(hostname)"
echo "KUBELET_EXTRA_ARGS=--provider-id=p1" > "$SIMVM_SANDBOX/etc/default/kubelet"
kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef --discovery-token-unsafe-skip-ca-verification --node-name n1
`
	out, errOut, status := sshRun(t, conn, "sh -s", script)
	if status != 0 || !strings.Contains(out, "joining from "+vm1) || !strings.Contains(out, "This node has joined the cluster") {
		t.Fatalf("join script: status %d\nstdout %q\nstderr %q", status, out, errOut)
	}
	// The VM reports the join before the exit status, so the node exists
	// by the time the client sees success.
	if n, ok := w.cluster.Get("n1"); !ok || n.ProviderID != "p1" {
		t.Fatalf("node n1 right after join: %+v %v", n, ok)
	}
	n, err := w.cluster.WaitFor(ctx, "n1", func(n simcluster.Node) bool { return n.Ready })
	if err != nil {
		t.Fatal(err)
	}
	if n.ProviderID != "p1" {
		t.Errorf("providerID = %q", n.ProviderID)
	}
	if info, _ := w.srv.VM(vm1); info.NodeName != "n1" || info.ProviderID != "p1" || info.Tags["nodesmith/pool"] != "e2e" {
		t.Errorf("VM info = %+v", info)
	}

	// Exit codes propagate.
	if _, _, status := sshRun(t, conn, "echo failing >&2; exit 42", ""); status != 42 {
		t.Errorf("exit status = %d, want 42", status)
	}

	// Without --node-name kubeadm names the node after the hostname (the
	// instance ID); the sample hook puts the providerID of the guest's
	// environment in /etc/default/kubelet, with the image's token and hash.
	conn2 := w.dial(t, byID[vm2], 2222)
	if _, errOut, status := sshRun(t, conn2, "sh -s", joinWithDefaults); status != 0 {
		t.Fatalf("join with defaults: %d %s", status, errOut)
	}
	wantProvider := ProviderID(testZone, vm2)
	if _, err := w.cluster.WaitFor(ctx, vm2, func(n simcluster.Node) bool { return n.Ready && n.ProviderID == wantProvider }); err != nil {
		t.Fatal(err)
	}
	// kubeadm reset makes the node NotReady.
	if _, _, status := sshRun(t, conn2, "kubeadm reset -f", ""); status != 0 {
		t.Fatal("reset failed")
	}
	if _, err := w.cluster.WaitFor(ctx, vm2, func(n simcluster.Node) bool { return !n.Ready }); err != nil {
		t.Fatal(err)
	}

	// Terminating the VM: its node goes NotReady but stays, and SSH is gone.
	if err := terminate(c, vm1); err != nil {
		t.Fatal(err)
	}
	if _, err := w.cluster.WaitFor(ctx, "n1", func(n simcluster.Node) bool { return !n.Ready }); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testTimeout)
	for {
		nc, err := net.DialTimeout("tcp", net.JoinHostPort(byID[vm1], "2222"), time.Second)
		if err != nil {
			break
		}
		_ = nc.Close()
		if time.Now().After(deadline) {
			t.Fatal("SSH server of terminated VM still accepts connections")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok := w.cluster.Get("n1"); !ok {
		t.Error("node object must survive VM termination")
	}
}

func TestSSHDisconnectKillsCommand(t *testing.T) {
	w := newSSHWorld(t)
	c := sdkClient(t, w.srv, testSecretID, testKey)
	ids, err := runInstances(c, runOpts{})
	if err != nil {
		t.Fatal(err)
	}
	in := waitState(t, c, ids, StateRunning)[0]
	conn := w.dial(t, *in.PrivateIpAddresses[0], *in.DefaultLoginPort)

	s, err := conn.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := s.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(`sleep 300 & echo $!; echo $$; wait`); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var pids []int
	for len(pids) < 2 && sc.Scan() {
		pid, err := strconv.Atoi(sc.Text())
		if err != nil {
			t.Fatalf("unexpected output %q", sc.Text())
		}
		pids = append(pids, pid)
	}
	if len(pids) != 2 {
		t.Fatalf("got pids %v (%v)", pids, sc.Err())
	}
	// The hook runner dies mid-command.
	_ = conn.Close()
	deadline := time.Now().Add(testTimeout)
	for _, pid := range pids {
		for !processGone(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d survived the disconnect", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestForceTerminateMarksNodeNotReady(t *testing.T) {
	w := newSSHWorld(t)
	c := sdkClient(t, w.srv, testSecretID, testKey)
	ids, err := runInstances(c, runOpts{})
	if err != nil {
		t.Fatal(err)
	}
	in := waitState(t, c, ids, StateRunning)[0]
	conn := w.dial(t, *in.PrivateIpAddresses[0], *in.DefaultLoginPort)
	if _, _, st := sshRun(t, conn, "kubeadm join "+testJoinArgs+" --node-name spot-1", ""); st != 0 {
		t.Fatal("join failed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := w.cluster.WaitFor(ctx, "spot-1", func(n simcluster.Node) bool { return n.Ready }); err != nil {
		t.Fatal(err)
	}
	if err := w.srv.ForceTerminate(ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := w.cluster.WaitFor(ctx, "spot-1", func(n simcluster.Node) bool { return !n.Ready }); err != nil {
		t.Fatal(err)
	}
	if err := w.srv.ForceTerminate("ins-00000000"); err == nil {
		t.Error("ForceTerminate of unknown VM must fail")
	}
}

// processGone reports whether pid no longer runs (absent, or a zombie that
// a container's init has not reaped yet).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] == 'Z'
}

func TestNoGoroutineLeaks(t *testing.T) {
	// Let goroutines of earlier tests wind down before taking the baseline.
	baseline := settleGoroutines(0)

	func() {
		w := newSSHWorld(t)
		c := sdkClient(t, w.srv, testSecretID, testKey)
		ids, err := runInstances(c, runOpts{count: 3})
		if err != nil {
			t.Fatal(err)
		}
		insts := waitState(t, c, ids, StateRunning)
		conn := w.dial(t, *insts[0].PrivateIpAddresses[0], *insts[0].DefaultLoginPort)
		if _, _, st := sshRun(t, conn, "kubeadm join "+testJoinArgs+" --node-name leak-1", ""); st != 0 {
			t.Fatal("join failed")
		}
		if err := terminate(c, ids[1]); err != nil {
			t.Fatal(err)
		}
		_ = conn.Close()
		if err := w.srv.Close(); err != nil {
			t.Fatal(err)
		}
		w.cluster.Close()
	}()

	// Idle client keep-alive connections and runtime helpers need a moment;
	// poll generously instead of asserting at one instant.
	const slack = 4
	n := settleGoroutines(baseline + slack)
	t.Logf("goroutines: baseline %d, after %d", baseline, n)
	if n > baseline+slack {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after Close, baseline %d:\n%s", n, baseline, buf[:runtime.Stack(buf, true)])
	}
}

// settleGoroutines polls until at most limit goroutines run (limit 0: until
// the count stops changing) or the test timeout passes, and returns the count.
func settleGoroutines(limit int) int {
	deadline := time.Now().Add(testTimeout)
	last := runtime.NumGoroutine()
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		n := runtime.NumGoroutine()
		if (limit > 0 && n <= limit) || (limit == 0 && n == last) {
			return n
		}
		last = n
	}
	return runtime.NumGoroutine()
}
