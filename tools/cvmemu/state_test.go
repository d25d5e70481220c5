package cvmemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/nodesmith/nodesmith/tools/simcluster"
	"github.com/nodesmith/nodesmith/tools/simvm"
)

// life is one run of a process hosting the emulator, its VMs and a cluster.
type life struct {
	srv     *Server
	factory *simvm.Factory
	cluster *simcluster.Cluster
	stop    func()
}

// persistentLife starts an emulator on stateFile whose VMs keep their
// sandboxes under root, as the embedded dev stack does.
func persistentLife(t *testing.T, stateFile, root, ipBase string, clientKey ssh.Signer) *life {
	t.Helper()
	vmCfg := simvm.DefaultConfig() // port 2222: addresses must be stable
	vmCfg.Root = root
	vmCfg.Persistent = true
	vmCfg.AuthorizedKeys = []ssh.PublicKey{clientKey.PublicKey()}
	vmCfg.OrphanGrace = 200 * time.Millisecond
	factory, err := simvm.NewFactory(vmCfg)
	if err != nil {
		t.Fatal(err)
	}
	cluster := simcluster.New(simcluster.Options{})
	cfg := testConfig()
	cfg.IPBase = ipBase
	cfg.StateFile = stateFile
	srv, err := Start("127.0.0.1:0", cfg, WithSSH(factory), WithCluster(cluster))
	if err != nil {
		_ = factory.Close()
		cluster.Close()
		t.Fatal(err)
	}
	l := &life{srv: srv, factory: factory, cluster: cluster}
	var once sync.Once
	l.stop = func() {
		once.Do(func() {
			if err := srv.Close(); err != nil {
				t.Errorf("close emulator: %v", err)
			}
			if err := factory.Close(); err != nil {
				t.Errorf("close factory: %v", err)
			}
			cluster.Close()
		})
	}
	t.Cleanup(l.stop)
	return l
}

// dialKey connects to addr as a client that pinned want (trust on first use
// when want is nil) and returns the host key the server presented.
func dialKey(t *testing.T, addr string, clientKey ssh.Signer, want ssh.PublicKey) (*ssh.Client, ssh.PublicKey) {
	t.Helper()
	var got ssh.PublicKey
	c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{
		User: "root",
		Auth: []ssh.AuthMethod{ssh.PublicKeys(clientKey)},
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			got = key
			if want != nil && !bytes.Equal(key.Marshal(), want.Marshal()) {
				return errors.New("REMOTE HOST IDENTIFICATION HAS CHANGED")
			}
			return nil
		},
		Timeout: testTimeout,
	})
	if err != nil {
		t.Fatalf("ssh %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, got
}

// vmAt returns a VM's state and due time together with the current time,
// all read under the emulator's lock.
func vmAt(e *Emulator, id string) (state string, due, now time.Time, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v := e.findLocked(id)
	if v == nil {
		return "", time.Time{}, time.Now(), false
	}
	return v.state, v.due, time.Now(), true
}

// stripRunDetails strips what legitimately differs between two runs.
func stripRunDetails(vms []VMInfo) []VMInfo {
	out := slices.Clone(vms)
	for i := range out {
		out[i].SSHAddr, out[i].Sandbox = "", ""
	}
	return out
}

func TestStateSurvivesRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for multi-second boot and terminate delays")
	}
	dir := t.TempDir()
	stateFile := filepath.Join(dir, "state", "cvm.json") // the directory is created
	root := filepath.Join(dir, "vms")
	ipBase := fmt.Sprintf("127.79.%d.1", rand.IntN(250))
	clientKey, err := simvm.GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	const slow = 3 * time.Second // boot/terminate delays that span the restart
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	// First life.
	l1 := persistentLife(t, stateFile, root, ipBase, clientKey)
	c1 := sdkClient(t, l1.srv, testSecretID, testKey)
	ids, err := runInstances(c1, runOpts{count: 2, token: "tok-run", name: "web", tags: map[string]string{"pool": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, c1, ids, StateRunning)
	joined, gone := ids[0], ids[1]
	info0, _ := l1.srv.VM(joined)
	conn, pinned := dialKey(t, info0.SSHAddr, clientKey, nil)
	script := "set -e\necho KUBELET_EXTRA_ARGS=--provider-id=prov-a >$HOME/etc/default/kubelet\n" +
		"kubeadm join " + testJoinArgs + " --node-name node-a >/dev/null\necho kept >$HOME/marker\n"
	if _, errOut, status := sshRun(t, conn, "sh -s", script); status != 0 {
		t.Fatalf("join: %d %s", status, errOut)
	}
	_ = conn.Close()
	if _, ok := l1.cluster.Get("node-a"); !ok {
		t.Fatal("node-a not registered in the first life")
	}

	l1.srv.SetLaunchPolicy(LaunchPolicy{FailZones: []string{"ap-guangzhou-4"}})
	failed, err := runInstances(c1, runOpts{token: "tok-fail", zone: "ap-guangzhou-4"})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, c1, failed, StateLaunchFailed)

	l1.srv.SetTerminateDelay(slow)
	if err := terminate(c1, gone); err != nil {
		t.Fatal(err)
	}
	l1.srv.SetBootDelay(slow)
	pending, err := runInstances(c1, runOpts{token: "tok-pending"})
	if err != nil {
		t.Fatal(err)
	}
	before := l1.srv.ListVMs()
	statsBefore := l1.srv.Stats()
	l1.stop() // the process exits

	saved, err := readStateFile(stateFile)
	if err != nil || saved == nil || saved.Version != stateVersion {
		t.Fatalf("state file after Close: %+v, %v", saved, err)
	}
	if _, err := os.Stat(filepath.Join(root, joined, simvm.HostKeyFile)); err != nil {
		t.Fatalf("sandbox of the running VM not kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, gone)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox of the terminated VM kept: %v", err)
	}

	// Second life: a new emulator, factory and cluster on the same files.
	l2 := persistentLife(t, stateFile, root, ipBase, clientKey)
	e2 := l2.srv.Emulator
	if got, want := stripRunDetails(l2.srv.ListVMs()), stripRunDetails(before); !equalInfos(got, want) {
		t.Fatalf("VMs after restart:\n%+v\nwant\n%+v", got, want)
	}
	// Transitions in flight resume on their original schedule: until it
	// is due, nothing happens.
	for _, id := range []string{pending[0], gone} {
		state, due, now, ok := vmAt(e2, id)
		var savedDue time.Time
		for _, v := range saved.Accounts["acct1"].VMs {
			if v.ID == id {
				savedDue = v.Due
			}
		}
		if savedDue.IsZero() || !due.Equal(savedDue) {
			t.Errorf("VM %s: due %v after restart, saved %v", id, due, savedDue)
		}
		if ok && now.Before(due) && state != map[string]string{gone: StateTerminating, pending[0]: StatePending}[id] {
			t.Errorf("VM %s is %s before its transition is due", id, state)
		}
	}

	// The running VM is the same machine, at the same address.
	info0b, ok := l2.srv.VM(joined)
	if !ok || info0b.SSHAddr != info0.SSHAddr {
		t.Fatalf("SSH address after restart %q, was %q", info0b.SSHAddr, info0.SSHAddr)
	}
	conn2, _ := dialKey(t, info0b.SSHAddr, clientKey, pinned)
	if out, _, status := sshRun(t, conn2, "cat $HOME/marker", ""); status != 0 || out != "kept\n" {
		t.Errorf("sandbox after restart: %d %q", status, out)
	}
	// Its kubelet came back: the fresh cluster knows the node again.
	n, err := l2.cluster.WaitFor(ctx, "node-a", func(n simcluster.Node) bool { return n.Ready })
	if err != nil || n.ProviderID != "prov-a" {
		t.Fatalf("node-a after restart: %+v, %v", n, err)
	}

	// A retry of the first RunInstances is answered from the record.
	c2 := sdkClient(t, l2.srv, testSecretID, testKey)
	again, err := runInstances(c2, runOpts{count: 2, token: "tok-run"})
	if err != nil || !slices.Equal(again, ids) {
		t.Fatalf("ClientToken replay after restart = %v, %v; want %v", again, err, ids)
	}
	stats := l2.srv.Stats()
	if stats.VMsCreated != statsBefore.VMsCreated || stats.VMsLaunchFailed != statsBefore.VMsLaunchFailed ||
		stats.VMsTerminated != statsBefore.VMsTerminated || stats.ClientTokenReplays["acct1/tok-run"] != 1 ||
		!mapsEqual(stats.ClientTokenCreations, statsBefore.ClientTokenCreations) {
		t.Errorf("stats after restart and replay = %+v\nbefore restart %+v", stats, statsBefore)
	}

	// The pending VM finishes booting, the terminating one vanishes.
	booted := waitState(t, c2, pending, StateRunning)
	_, pendingKey := dialKey(t, net.JoinHostPort(*booted[0].PrivateIpAddresses[0], "2222"), clientKey, nil)
	if pendingKey == nil {
		t.Fatal("no host key from the booted VM")
	}
	deadline := time.Now().Add(testTimeout)
	for {
		resp, err := describeIDs(c2, []string{gone})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.InstanceSet) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("terminated VM %s still listed", gone)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The allocator goes on where it was: no address is handed out twice.
	l2.srv.SetBootDelay(0)
	fresh, err := runInstances(c2, runOpts{token: "tok-new"})
	if err != nil {
		t.Fatal(err)
	}
	freshIP := netip.MustParseAddr(*waitState(t, c2, fresh, StateRunning)[0].PrivateIpAddresses[0])
	for _, vm := range append(before, mustVM(t, l2.srv, pending[0])) {
		if vm.PrivateIP != "" && !netip.MustParseAddr(vm.PrivateIP).Less(freshIP) {
			t.Errorf("new VM got %s, not after %s of %s", freshIP, vm.PrivateIP, vm.ID)
		}
	}
}

func mustVM(t *testing.T, s *Server, id string) VMInfo {
	t.Helper()
	v, ok := s.VM(id)
	if !ok {
		t.Fatalf("VM %s not found", id)
	}
	return v
}

func equalInfos(a, b []VMInfo) bool {
	return slices.EqualFunc(a, b, func(x, y VMInfo) bool {
		return x.ID == y.ID && x.Account == y.Account && x.Region == y.Region && x.Zone == y.Zone &&
			x.InstanceType == y.InstanceType && x.ImageID == y.ImageID && x.Name == y.Name && x.State == y.State &&
			x.PrivateIP == y.PrivateIP && x.ClientToken == y.ClientToken && x.CreatedAt.Equal(y.CreatedAt) &&
			mapsEqual(x.Tags, y.Tags) && x.NodeName == y.NodeName && x.ProviderID == y.ProviderID
	})
}

func mapsEqual[V comparable](a, b map[string]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestStateFileErrors(t *testing.T) {
	vm := func(mod string) string {
		base := map[string]string{
			"id": `"ins-abcd1234"`, "region": `"ap-guangzhou"`, "zone": `"ap-guangzhou-3"`,
			"state": `"RUNNING"`, "privateIp": `"127.77.0.1"`, "outcome": `"boot"`,
		}
		k, v, _ := strings.Cut(mod, "=")
		if k != "" {
			base[k] = v
		}
		var fields []string
		for k, v := range base {
			if v != "-" {
				fields = append(fields, strconv.Quote(k)+":"+v)
			}
		}
		return `{"version":1,"accounts":{"acct1":{"vms":[{` + strings.Join(fields, ",") + `}],"tokens":[]}}}`
	}
	valid := vm("")
	tests := []struct {
		name, content, want string
	}{
		{"garbage", "not json at all", "corrupt"},
		{"empty", "", "corrupt"},
		{"truncated", valid[:len(valid)/2], "corrupt"},
		{"no version", `{"accounts":{}}`, "no format version"},
		{"other version", `{"version":99,"future":true}`, "format version 99"},
		{"unknown field", `{"version":1,"bogus":1}`, "corrupt"},
		{"trailing data", valid + "{}", "corrupt"},
		{"malformed id", vm(`id="i-1"`), "malformed instance id"},
		{"unknown state", vm(`state="STOPPED"`), "unknown state"},
		{"unknown outcome", vm(`outcome="maybe"`), "unknown launch outcome"},
		{"running without IP", vm(`privateIp=-`), "without a private IP"},
		{"IP outside loopback", vm(`privateIp="10.0.0.1"`), "invalid private IP"},
		{"duplicate VM", strings.Replace(valid, `"acct1"`, `"acct2":{"vms":[{"id":"ins-abcd1234","region":"r","zone":"r-1","state":"PENDING","outcome":"boot"}]},"acct1"`, 1), "listed twice"},
		{"duplicate token", `{"version":1,"accounts":{"a":{"vms":[],"tokens":[{"token":"t","ids":[]},{"token":"t","ids":[]}]}}}`, "listed twice"},
		{"bad token id", `{"version":1,"accounts":{"a":{"vms":[],"tokens":[{"token":"t","ids":["x"]}]}}}`, "malformed instance id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cvm.json")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := testConfig()
			cfg.StateFile = path
			e, err := New(cfg)
			if err == nil {
				_ = e.Close()
				t.Fatal("New accepted the state file")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not say %q about %s", err, tt.want, path)
			}
			// Never overwritten: it is the operator's to inspect.
			if b, err := os.ReadFile(path); err != nil || string(b) != tt.content {
				t.Errorf("state file changed: %q, %v", b, err)
			}
		})
	}

	t.Run("unreadable", func(t *testing.T) {
		path := t.TempDir() // a directory cannot be read as a file
		cfg := testConfig()
		cfg.StateFile = path
		if e, err := New(cfg); err == nil {
			_ = e.Close()
			t.Fatal("New accepted a directory as state file")
		} else if !strings.Contains(err.Error(), path) {
			t.Errorf("error %q does not name %s", err, path)
		}
	})

	t.Run("valid control", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "cvm.json")
		if err := os.WriteFile(path, []byte(valid), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig()
		cfg.StateFile = path
		e, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if v, ok := e.VM("ins-abcd1234"); !ok || v.State != StateRunning || v.PrivateIP != "127.77.0.1" {
			t.Errorf("restored VM = %+v, %v", v, ok)
		}
	})

	t.Run("missing file starts empty", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sub", "cvm.json")
		cfg := testConfig()
		cfg.StateFile = path
		e, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if n := len(e.ListVMs()); n != 0 {
			t.Errorf("%d VMs in a new emulator", n)
		}
		st, err := readStateFile(path) // written at once, so a bad path fails New
		if err != nil || st == nil || st.Version != stateVersion {
			t.Errorf("state file = %+v, %v", st, err)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("state file mode: %v, %v", fi, err)
		}
	})
}

func TestStateSaveKeepsLastChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cvm.json")
	cfg := testConfig()
	cfg.StateFile = path
	cfg.TerminateDelay = time.Hour // keep terminated VMs listed
	s := startServer(t, cfg)
	c := sdkClient(t, s, testSecretID, testKey)

	// A burst of changes, far faster than the save interval.
	var ids []string
	for i := range 15 {
		got, err := runInstances(c, runOpts{token: fmt.Sprintf("burst-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	waitState(t, c, ids, StateRunning)
	last := ids[len(ids)-1]
	if err := terminate(c, last); err != nil {
		t.Fatal(err)
	}
	// The final change reaches the file without Close.
	waitSaved(t, path, func(st *stateFile) bool {
		vms := st.Accounts["acct1"].VMs
		return len(vms) == len(ids) && vms[len(vms)-1].ID == last && vms[len(vms)-1].State == StateTerminating &&
			len(st.Accounts["acct1"].Tokens) == len(ids)
	})
	// Changes outside the API are saved too.
	if err := s.ForceTerminate(ids[0]); err != nil {
		t.Fatal(err)
	}
	waitSaved(t, path, func(st *stateFile) bool {
		return st.Accounts["acct1"].VMs[0].State == StateTerminating && st.Counters.Terminated == 2
	})

	// A change right before Close is not lost either (saved by the saver
	// or by Close); a new emulator has exactly the final state.
	if err := s.ForceTerminate(ids[1]); err != nil {
		t.Fatal(err)
	}
	want := s.ListVMs()
	if want[1].State != StateTerminating {
		t.Fatalf("VM %s is %s", want[1].ID, want[1].State)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if got := e.ListVMs(); !equalInfos(got, want) {
		t.Errorf("after reload:\n%+v\nwant\n%+v", got, want)
	}
}

// waitSaved polls the state file until ok accepts it.
func waitSaved(t *testing.T, path string, ok func(*stateFile) bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		st, err := readStateFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if st != nil && st.Accounts["acct1"] != nil && ok(st) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("state file never showed the expected change: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStateRestartWaitsForBusyAddress(t *testing.T) {
	dir := t.TempDir()
	stateFile, root := filepath.Join(dir, "cvm.json"), filepath.Join(dir, "vms")
	ipBase := fmt.Sprintf("127.79.%d.1", rand.IntN(250))
	clientKey, err := simvm.GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	l1 := persistentLife(t, stateFile, root, ipBase, clientKey)
	c1 := sdkClient(t, l1.srv, testSecretID, testKey)
	ids, err := runInstances(c1, runOpts{count: 2, token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, c1, ids, StateRunning)
	kept, dropped := mustVM(t, l1.srv, ids[0]), mustVM(t, l1.srv, ids[1])
	_, pinned := dialKey(t, kept.SSHAddr, clientKey, nil)
	l1.stop()

	// Something else holds both addresses when the emulator comes back.
	var holders []net.Listener
	for _, vm := range []VMInfo{kept, dropped} {
		ln, err := net.Listen("tcp", vm.SSHAddr)
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, ln)
		defer ln.Close()
	}
	l2 := persistentLife(t, stateFile, root, ipBase, clientKey)
	for _, vm := range []VMInfo{kept, dropped} {
		// RUNNING at its address, but unreachable for now.
		if got := mustVM(t, l2.srv, vm.ID); got.State != StateRunning || got.PrivateIP != vm.PrivateIP || got.SSHAddr != "" {
			t.Errorf("VM with a busy address after restart: %+v", got)
		}
	}

	// Terminated before its guest is back: its sandbox goes anyway.
	c2 := sdkClient(t, l2.srv, testSecretID, testKey)
	if err := terminate(c2, dropped.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "sandbox of the terminated VM removed", func() bool {
		_, err := os.Stat(filepath.Join(root, dropped.ID))
		return errors.Is(err, os.ErrNotExist)
	})

	// Once the address is free, the guest comes back there, same key.
	_ = holders[0].Close()
	waitFor(t, "guest back on its address", func() bool { return mustVM(t, l2.srv, kept.ID).SSHAddr == kept.SSHAddr })
	conn, _ := dialKey(t, kept.SSHAddr, clientKey, pinned)
	if out, _, status := sshRun(t, conn, "echo up", ""); status != 0 || out != "up\n" {
		t.Errorf("after the address was freed: %d %q", status, out)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
