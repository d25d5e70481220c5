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

// joinArgs is the discovery part of a valid kubeadm join, with the token and
// CA certificate hash of the simulated VMs' image.
const joinArgs = "10.0.0.1:6443 --token " + DevJoinToken + " --discovery-token-ca-cert-hash " + DevCACertHash

// sampleJoinHook is the join hook the repository documents (README.md,
// services/lifecycle/README.md, deploy/, dev/), word for word: it works on a
// real Ubuntu VM with kubeadm installed and on a simulated one.
const sampleJoinHook = `set -eu
# On a real VM $SIMVM_SANDBOX is unset and these are the real paths; the
# simulated VMs of ` + "`make run`" + ` keep their files under it.
etc="${SIMVM_SANDBOX:-}/etc"
echo "KUBELET_EXTRA_ARGS=--provider-id=$PROVIDER_ID" > "$etc/default/kubelet"
kubeadm join "$API_SERVER" --node-name "$NODE_NAME" \
  --token "$(cat "$etc/kubeadm/token")" \
  --discovery-token-ca-cert-hash "$(cat "$etc/kubeadm/ca-cert-hash")"
`

func TestScriptOnStdinJoinsAndResets(t *testing.T) {
	e := newEnv(t, nil)
	var mu sync.Mutex
	var events []string
	vm := e.startVM(VMSpec{
		// Not a kubeadm thing: the shim must not take its defaults from here.
		Env: map[string]string{"NODE_NAME": "env-node", "PROVIDER_ID": "env-provider"},
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
		OnDrain: func(id string, args []string) error {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, fmt.Sprintf("drain %s %s", id, strings.Join(args, " ")))
			return nil
		},
	})
	c := e.dial(vm)

	script := "set -e\nhostnamectl set-hostname n1\n" +
		"echo KUBELET_EXTRA_ARGS=--provider-id=p1 >\"$SIMVM_SANDBOX/etc/default/kubelet\"\n" +
		"kubeadm join " + joinArgs + " --node-name n1\necho done\n"
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
	if _, err := os.Stat(filepath.Join(vm.Sandbox(), KubeletConfFile)); err != nil {
		t.Errorf("join did not write kubelet.conf: %v", err)
	}

	// A second join fails its preflight check, like the real kubeadm.
	_, errOut, code = run(t, c, "kubeadm join "+joinArgs+" --node-name n1", "")
	if code != 1 || !strings.Contains(errOut, "kubelet.conf already exists") {
		t.Errorf("re-join: code %d, stderr %q", code, errOut)
	}

	if _, _, code := run(t, c, "kubectl drain n1 --ignore-daemonsets && kubeadm reset -f", ""); code != 0 {
		t.Fatalf("reset: code %d", code)
	}
	if _, err := os.Stat(filepath.Join(vm.Sandbox(), KubeletConfFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("reset left kubelet.conf: %v", err)
	}
	// Joining again with the real kubeadm's defaults: the hostname is the
	// node name and, without /etc/default/kubelet, the kubelet has no
	// providerID (NODE_NAME and PROVIDER_ID in the environment are ignored).
	if _, errOut, code := run(t, c, "hostnamectl set-hostname n2 && rm \"$SIMVM_SANDBOX/etc/default/kubelet\" && kubeadm join "+joinArgs, ""); code != 0 {
		t.Fatalf("join with defaults: code %d, %s", code, errOut)
	}

	mu.Lock()
	defer mu.Unlock()
	id := vm.ID()
	// The drain is handed over before the reset of the same command.
	want := []string{"join " + id + " n1 p1", "drain " + id + " n1 --ignore-daemonsets", "reset " + id + " n1", "join " + id + " n2 "}
	if fmt.Sprint(events) != fmt.Sprint(want) {
		t.Errorf("events = %q\nwant     %q", events, want)
	}
	b, err := os.ReadFile(filepath.Join(vm.Sandbox(), LogDir, "kubectl.log"))
	if err != nil || !strings.Contains(string(b), "kubectl drain n1 --ignore-daemonsets") {
		t.Errorf("kubectl log = %q, %v", b, err)
	}
}

// TestFailedDrainFailsTheCommand: an error of OnDrain reaches the
// command's stderr and exit status, as a kubectl drain that cannot evict
// fails; a drain that succeeds leaves the status alone.
func TestFailedDrainFailsTheCommand(t *testing.T) {
	e := newEnv(t, nil)
	fail := true
	vm := e.startVM(VMSpec{OnDrain: func(_ string, args []string) error {
		if fail {
			return fmt.Errorf("cannot evict the pods of %s", args[0])
		}
		return nil
	}})
	c := e.dial(vm)
	_, errOut, code := run(t, c, "kubectl drain n1 --force; echo after", "")
	if code != 1 || !strings.Contains(errOut, "error: cannot evict the pods of n1") {
		t.Errorf("failed drain: code %d, stderr %q", code, errOut)
	}
	fail = false
	if _, errOut, code := run(t, c, "kubectl drain n1", ""); code != 0 {
		t.Errorf("drain: code %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(vm.Sandbox(), DrainRequestFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("drain requests left behind: %v", err)
	}
}

func TestKubeadmRejectsBadNodeName(t *testing.T) {
	e := newEnv(t, nil)
	vm := e.startVM(VMSpec{})
	c := e.dial(vm)
	for _, args := range []string{"--node-name Bad_Name", "--node-name -x", "--node-name"} {
		if _, _, code := run(t, c, "kubeadm join "+joinArgs+" "+args, ""); code == 0 {
			t.Errorf("kubeadm join %q succeeded", args)
		}
	}
	if _, ok := vm.Joined(); ok {
		t.Error("VM joined despite errors")
	}
}

// The kubeadm shim refuses what the real kubeadm refuses, with its message.
func TestKubeadmIsAsStrictAsTheRealOne(t *testing.T) {
	e := newEnv(t, nil)
	vm := e.startVM(VMSpec{})
	c := e.dial(vm)
	const stack = "To see the stack trace of this error execute with --v=5 or higher\n"

	// There is no --provider-id flag: cobra's error, word for word.
	for _, args := range []string{joinArgs + " --node-name n1 --provider-id p1", "--provider-id=p1 " + joinArgs} {
		_, errOut, code := run(t, c, "kubeadm join "+args, "")
		if code != 1 || errOut != "unknown flag: --provider-id\n"+stack {
			t.Errorf("kubeadm join %s: code %d, stderr %q", args, code, errOut)
		}
	}

	cfg := filepath.Join(vm.Sandbox(), "tmp", "join.yaml")
	if err := os.WriteFile(cfg, []byte(joinConfigV1beta4), 0o644); err != nil {
		t.Fatal(err)
	}
	const (
		token = " --token " + DevJoinToken
		hash  = " --discovery-token-ca-cert-hash " + DevCACertHash
	)
	for _, tc := range []struct{ name, args, want string }{
		{"unknown shorthand", joinArgs + " -p p1", "unknown shorthand flag: 'p' in -p"},
		{"no discovery", "--node-name n1", `discovery: Invalid value: "": bootstrapToken or file must be set`},
		{"token without endpoint", "--node-name n1" + token + hash, "bootstrapToken or file must be set"},
		{"no CA pinning", "10.0.0.1:6443" + token, "using token-based discovery without caCertHashes can be unsafe"},
		{"no token", "10.0.0.1:6443" + hash, `discovery.bootstrapToken.token: Invalid value: "": the bootstrap token is invalid`},
		{"bad token", "10.0.0.1:6443 --token abc" + hash, `discovery.bootstrapToken.token: Invalid value: "abc": the bootstrap token is invalid`},
		{"upper-case token", "10.0.0.1:6443 --token ABCDEF.0123456789abcdef" + hash, "the bootstrap token is invalid"},
		{"bad TLS bootstrap token", "10.0.0.1:6443" + token + hash + " --tls-bootstrap-token x", `discovery.tlsBootstrapToken: Invalid value: "x"`},
		{"endpoint without port", "10.0.0.1" + token + hash, "address 10.0.0.1: missing port in address"},
		{"short CA hash", "10.0.0.1:6443" + token + " --discovery-token-ca-cert-hash sha256:abc", "invalid discovery token CA certificate hash: invalid hash \"sha256:abc\", expected a 32 byte SHA-256 hash"},
		{"CA hash format", "10.0.0.1:6443" + token + " --discovery-token-ca-cert-hash md5:abc", `unknown hash format "md5"`},
		{"two endpoints", joinArgs + " 10.0.0.2:6443", "accepts at most 1 arg(s), received 2"},
		{"missing file", "--discovery-file /nowhere/cluster-info.yaml", "not a valid HTTPS URL or a file on disk"},
		{"file and token discovery", joinArgs + " --discovery-file https://example.com/c.yaml", "bootstrapToken and file cannot both be set"},
		{"missing value", joinArgs + " --node-name", "flag needs an argument: --node-name"},
		{"bad boolean", joinArgs + " --dry-run=maybe", `invalid argument "maybe" for "--dry-run" flag`},
		{"bad level", joinArgs + " -v x", `invalid argument "x" for "-v, --v" flag`},
		{"config mixed with token", "--config " + cfg + token, "can not mix '--config' with arguments [token]"},
		{"config mixed with discovery flags", "--config " + cfg + hash + " --discovery-token-unsafe-skip-ca-verification",
			"can not mix '--config' with arguments [discovery-token-ca-cert-hash discovery-token-unsafe-skip-ca-verification]"},
		{"missing config", "--config /nowhere/join.yaml", `unable to read config from "/nowhere/join.yaml"`},
		{"all and one check", joinArgs + " --ignore-preflight-errors=all,Swap", "don't specify individual checks if 'all' is used"},
	} {
		_, errOut, code := run(t, c, "kubeadm join "+tc.args, "")
		if code != 1 || !strings.Contains(errOut, tc.want) || !strings.HasSuffix(errOut, stack) {
			t.Errorf("%s: kubeadm join %s: code %d, stderr %q, want %q", tc.name, tc.args, code, errOut, tc.want)
		}
	}
	for _, args := range []string{"--bogus", "-f --provider-id p1"} {
		if _, errOut, code := run(t, c, "kubeadm reset "+args, ""); code != 1 || !strings.HasPrefix(errOut, "unknown flag: ") {
			t.Errorf("kubeadm reset %s: code %d, stderr %q", args, code, errOut)
		}
	}
	if _, ok := vm.Joined(); ok {
		t.Error("VM joined despite errors")
	}
	// Real flags in all their real forms are accepted.
	args := "--v=2 join -v 3 --node-name=n1 " + joinArgs + " --ignore-preflight-errors Swap,IsPrivilegedUser --ignore-preflight-errors=Mem --skip-phases= --cri-socket unix:///run/containerd/containerd.sock --skip-headers"
	if _, errOut, code := run(t, c, "kubeadm "+args, ""); code != 0 {
		t.Fatalf("kubeadm %s: code %d, %s", args, code, errOut)
	}
	if js, ok := vm.Joined(); !ok || js != (JoinState{NodeName: "n1"}) {
		t.Errorf("Joined() = %+v, %v", js, ok)
	}
}

func TestKubeadmProviderIDFromKubeletDefaults(t *testing.T) {
	e := newEnv(t, nil)
	vm := e.startVM(VMSpec{Hostname: "Host-1"})
	c := e.dial(vm)
	// The file as an admin would write it: quoted, with other kubelet
	// flags; the kubelet takes the last --provider-id.
	defaults := "# kubelet flags\nKUBELET_EXTRA_ARGS=\"--v=2 --provider-id=old --node-labels=a=b --provider-id qcloud:///ap-guangzhou-3/ins-1\"\n"
	if err := os.WriteFile(filepath.Join(vm.Sandbox(), KubeletDefaultsFile), []byte(defaults), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, c, "kubeadm join "+joinArgs, ""); code != 0 {
		t.Fatalf("join: code %d, %s", code, errOut)
	}
	// No --node-name: the hostname, lowercased as kubeadm does.
	if js, ok := vm.Joined(); !ok || js != (JoinState{NodeName: "host-1", ProviderID: "qcloud:///ap-guangzhou-3/ins-1"}) {
		t.Errorf("Joined() = %+v, %v", js, ok)
	}
}

const joinConfigV1beta3 = `# v1beta3: kubeletExtraArgs is a map
apiVersion: kubeadm.k8s.io/v1beta3
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: "10.0.0.1:6443"
    token: abcdef.0123456789abcdef
    caCertHashes:
    - sha256:358eb75945ac55049197175aa3446a424545c8b48d0e94a671fdab00c4774e11
nodeRegistration:
  name: cfg-node-3
  kubeletExtraArgs:
    node-labels: pool=a
    provider-id: "qcloud:///ap-guangzhou-3/ins-3"
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
`

const joinConfigV1beta4 = `apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: 10.0.0.1:6443
    token: abcdef.0123456789abcdef
    unsafeSkipCAVerification: true
nodeRegistration:
  name: cfg-node-4
  kubeletExtraArgs:   # v1beta4: a list of name/value pairs
  - name: node-labels
    value: pool=b
  - name: provider-id
    value: 'qcloud:///ap-guangzhou-3/ins-4'
`

func TestKubeadmJoinConfiguration(t *testing.T) {
	e := newEnv(t, nil)
	vm := e.startVM(VMSpec{})
	c := e.dial(vm)
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(vm.Sandbox(), "tmp", name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, config, flags string
		want                JoinState
	}{
		{"v1beta3", joinConfigV1beta3, "", JoinState{NodeName: "cfg-node-3", ProviderID: "qcloud:///ap-guangzhou-3/ins-3"}},
		{"v1beta4", joinConfigV1beta4, "", JoinState{NodeName: "cfg-node-4", ProviderID: "qcloud:///ap-guangzhou-3/ins-4"}},
		// --node-name is one of the flags kubeadm allows beside --config.
		{"v1beta4 with --node-name", joinConfigV1beta4, " --node-name n4 --v=2", JoinState{NodeName: "n4", ProviderID: "qcloud:///ap-guangzhou-3/ins-4"}},
	} {
		cfg := write(strings.ReplaceAll(tc.name, " ", "_")+".yaml", tc.config)
		if _, errOut, code := run(t, c, "kubeadm join --config "+cfg+tc.flags, ""); code != 0 {
			t.Fatalf("%s: join: code %d, %s", tc.name, code, errOut)
		}
		if js, ok := vm.Joined(); !ok || js != tc.want {
			t.Errorf("%s: Joined() = %+v, %v, want %+v", tc.name, js, ok, tc.want)
		}
		if _, errOut, code := run(t, c, "kubeadm reset --force", ""); code != 0 {
			t.Fatalf("%s: reset: code %d, %s", tc.name, code, errOut)
		}
	}

	// Each version has its own kubeletExtraArgs shape; the other one is
	// refused, as kubeadm's strict decoding refuses it.
	for _, tc := range []struct{ file, content, want string }{
		{"v1beta4-map.yaml", strings.Replace(joinConfigV1beta3, "kubeadm.k8s.io/v1beta3", "kubeadm.k8s.io/v1beta4", 1), "cannot unmarshal object"},
		{"v1beta3-list.yaml", strings.Replace(joinConfigV1beta4, "kubeadm.k8s.io/v1beta4", "kubeadm.k8s.io/v1beta3", 1), "cannot unmarshal array"},
		{"no-discovery.yaml", "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\nnodeRegistration:\n  name: x\n", "bootstrapToken or file must be set"},
		{"no-join.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n", "no JoinConfiguration found"},
		{"old.yaml", strings.Replace(joinConfigV1beta4, "kubeadm.k8s.io/v1beta4", "kubeadm.k8s.io/v1beta2", 1), "uses an old API spec"},
	} {
		cfg := write(tc.file, tc.content)
		if _, errOut, code := run(t, c, "kubeadm join --config "+cfg, ""); code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("join --config %s: code %d, stderr %q, want %q", tc.file, code, errOut, tc.want)
		}
	}
	if _, ok := vm.Joined(); ok {
		t.Error("joined with a refused configuration")
	}

	// KUBELET_EXTRA_ARGS comes after kubeadm's flags on the kubelet's
	// command line: /etc/default/kubelet wins.
	if err := os.WriteFile(filepath.Join(vm.Sandbox(), KubeletDefaultsFile), []byte("KUBELET_EXTRA_ARGS=--provider-id=from-defaults\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, c, "kubeadm join --config "+write("again.yaml", joinConfigV1beta4), ""); code != 0 {
		t.Fatalf("join: code %d, %s", code, errOut)
	}
	if js, _ := vm.Joined(); js != (JoinState{NodeName: "cfg-node-4", ProviderID: "from-defaults"}) {
		t.Errorf("Joined() = %+v", js)
	}
}

func TestKubeadmResetAsksForConfirmation(t *testing.T) {
	e := newEnv(t, nil)
	vm := e.startVM(VMSpec{})
	c := e.dial(vm)
	if _, errOut, code := run(t, c, "kubeadm join "+joinArgs+" --node-name n1", ""); code != 0 {
		t.Fatalf("join: code %d, %s", code, errOut)
	}
	for _, stdin := range []string{"", "n\n", "yes\n"} {
		out, errOut, code := run(t, c, "kubeadm reset", stdin)
		if code == 0 || !strings.Contains(out, "[reset] Are you sure you want to proceed? [y/N]: ") || !strings.Contains(errOut, "aborted reset operation") {
			t.Errorf("reset with stdin %q: code %d, stdout %q, stderr %q", stdin, code, out, errOut)
		}
		if _, ok := vm.Joined(); !ok {
			t.Fatalf("reset with stdin %q left the cluster", stdin)
		}
	}
	if _, errOut, code := run(t, c, "kubeadm reset", "Y\n"); code != 0 {
		t.Fatalf("confirmed reset: code %d, %s", code, errOut)
	}
	if _, ok := vm.Joined(); ok {
		t.Error("still joined after a confirmed reset")
	}
}

// The documented join hook, run as the hook runner runs it (its environment
// exported at the top of the script, the script on the stdin of "sh -s"),
// joins with the providerID lifecycle gave it.
func TestSampleJoinHook(t *testing.T) {
	e := newEnv(t, nil)
	joins := make(chan JoinState, 1)
	vm := e.startVM(VMSpec{OnJoin: func(_, node, provider string) { joins <- JoinState{NodeName: node, ProviderID: provider} }})
	c := e.dial(vm)
	for path, want := range map[string]string{KubeadmTokenFile: DevJoinToken + "\n", KubeadmCACertHashFile: DevCACertHash + "\n"} {
		if b, err := os.ReadFile(filepath.Join(vm.Sandbox(), path)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", path, b, err, want)
		}
	}
	env := "export API_SERVER='10.0.0.1:6443'\nexport NODE_NAME='workers-abc12'\n" +
		"export PROVIDER_ID='externalgrpc://tencentcloud/dev/ap-guangzhou/ins-1234'\n"
	out, errOut, code := run(t, c, "sh -s", env+sampleJoinHook)
	if code != 0 || !strings.Contains(out, "This node has joined the cluster") {
		t.Fatalf("sample hook: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	want := JoinState{NodeName: "workers-abc12", ProviderID: "externalgrpc://tencentcloud/dev/ap-guangzhou/ins-1234"}
	select {
	case js := <-joins:
		if js != want {
			t.Errorf("join reported as %+v, want %+v", js, want)
		}
	default:
		t.Fatal("no join reported by the time the hook ended")
	}
	if b, err := os.ReadFile(filepath.Join(vm.Sandbox(), KubeletDefaultsFile)); err != nil || string(b) != "KUBELET_EXTRA_ARGS=--provider-id="+want.ProviderID+"\n" {
		t.Errorf("%s = %q, %v", KubeletDefaultsFile, b, err)
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
					cmd = fmt.Sprintf("kubeadm join %s --node-name node-%d >/dev/null && echo %d-%d", joinArgs, i, i, j)
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
