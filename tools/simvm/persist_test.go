package simvm

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// persistentEnv is a Persistent factory on root whose VMs present plain host
// keys (no CA), so clients must pin them on first use.
func persistentEnv(t *testing.T, root string) *env {
	t.Helper()
	return newEnv(t, func(c *Config) {
		c.Root = root
		c.Persistent = true
		c.HostCA = nil
	})
}

// dialPinned connects trusting only pinned; if pinned is nil it trusts the
// first key it sees (trust on first use) and returns it.
func dialPinned(t *testing.T, e *env, addr string, pinned ssh.PublicKey) (*ssh.Client, ssh.PublicKey) {
	t.Helper()
	var seen ssh.PublicKey
	cb := func(_ string, _ net.Addr, key ssh.PublicKey) error {
		seen = key
		if pinned != nil && !bytes.Equal(key.Marshal(), pinned.Marshal()) {
			return errors.New("host key changed")
		}
		return nil
	}
	c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{
		User:            "root",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(e.client)},
		HostKeyCallback: cb,
		Timeout:         testTimeout,
	})
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, seen
}

func TestPersistentVMSurvivesRestart(t *testing.T) {
	root := t.TempDir()
	const id = "ins-persist1"

	// First life: pin the key, join, change the machine.
	e1 := persistentEnv(t, root)
	vm1 := e1.startVM(VMSpec{ID: id})
	ip := vm1.IP()
	c1, pinned := dialPinned(t, e1, vm1.Addr(), nil)
	script := "set -e\nhostnamectl set-hostname n1\necho KUBELET_EXTRA_ARGS=--provider-id=p1 >$HOME/etc/default/kubelet\n" +
		"kubeadm join " + joinArgs + " >/dev/null\necho kept >$HOME/marker\necho other-token >$HOME/" + KubeadmTokenFile + "\n"
	if _, errOut, code := run(t, c1, "sh -s", script); code != 0 {
		t.Fatalf("setup script: code %d, %s", code, errOut)
	}
	_ = c1.Close()
	if err := e1.factory.Close(); err != nil { // the process exits
		t.Fatal(err)
	}
	keyInfo, err := os.Stat(filepath.Join(root, id, HostKeyFile))
	if err != nil {
		t.Fatalf("host key not kept: %v", err)
	}
	if perm := keyInfo.Mode().Perm(); perm != 0o600 {
		t.Errorf("host key mode = %o, want 600", perm)
	}

	// Second life, in a new factory on the same root.
	e2 := persistentEnv(t, root)
	joins := make(chan JoinState, 4)
	onJoin := func(_, node, provider string) { joins <- JoinState{NodeName: node, ProviderID: provider} }
	vm2, err := e2.factory.Start(VMSpec{ID: id, IP: ip, OnJoin: onJoin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vm2.Close() })
	select { // Start reports the recorded join before returning.
	case js := <-joins:
		if js != (JoinState{NodeName: "n1", ProviderID: "p1"}) {
			t.Errorf("re-join = %+v", js)
		}
	default:
		t.Fatal("Start did not report the recorded join")
	}
	if js, ok := vm2.Joined(); !ok || js.NodeName != "n1" {
		t.Errorf("Joined() = %+v, %v", js, ok)
	}
	if vm2.Addr() != vm1.Addr() {
		t.Errorf("address %s, was %s", vm2.Addr(), vm1.Addr())
	}
	c2, _ := dialPinned(t, e2, vm2.Addr(), pinned) // fails if the key changed
	out, _, code := run(t, c2, "cat $HOME/marker; hostname; cat $HOME/"+KubeadmTokenFile, "")
	if code != 0 || out != "kept\nn1\nother-token\n" {
		t.Errorf("after restart: code %d, out %q", code, out)
	}
	// Still joined, so kubeadm refuses to join again, like on a real node.
	if _, errOut, code := run(t, c2, "kubeadm join "+joinArgs+" --node-name n1", ""); code != 1 || !strings.Contains(errOut, "already exists") {
		t.Errorf("re-join after restart: code %d, %s", code, errOut)
	}
	if len(joins) != 0 {
		t.Errorf("unexpected extra join reports: %d", len(joins))
	}

	// The same ID cannot run twice, nor be discarded while running.
	if _, err := e2.factory.Start(VMSpec{ID: id, IP: testIP()}); !errors.Is(err, ErrRunning) {
		t.Errorf("second Start: err = %v, want ErrRunning", err)
	}
	if err := e2.factory.Discard(id); !errors.Is(err, ErrRunning) {
		t.Errorf("Discard of a running VM: err = %v, want ErrRunning", err)
	}

	// Destroy: gone for good, even though the factory is persistent.
	if err := vm2.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, id)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("sandbox survived Destroy: %v", err)
	}
	vm3 := e2.startVM(VMSpec{ID: id, IP: ip, OnJoin: onJoin})
	if bytes.Equal(vm3.HostKey().Marshal(), pinned.Marshal()) {
		t.Error("a new machine with the old ID got the old host key")
	}
	if _, ok := vm3.Joined(); ok || len(joins) != 0 {
		t.Error("a new machine reported a join")
	}

	// Close keeps the sandbox; Discard removes it.
	if err := vm3.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, id, HostKeyFile)); err != nil {
		t.Fatalf("Close removed the sandbox: %v", err)
	}
	if err := e2.factory.Discard(id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox survived Discard: %v", err)
	}
}

func TestPersistentCorruptHostKeyIsAnError(t *testing.T) {
	root := t.TempDir()
	const id = "ins-corrupt1"
	if err := os.MkdirAll(filepath.Join(root, id, filepath.Dir(HostKeyFile)), 0o755); err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(root, id, HostKeyFile)
	if err := os.WriteFile(keyPath, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := persistentEnv(t, root)
	vm, err := e.factory.Start(VMSpec{ID: id, IP: testIP()})
	if err == nil {
		_ = vm.Close()
		t.Fatal("Start succeeded with a corrupt host key")
	}
	if !strings.Contains(err.Error(), "host key") {
		t.Errorf("error does not name the host key: %v", err)
	}
	// The broken sandbox is left for inspection, not wiped.
	if b, err := os.ReadFile(keyPath); err != nil || string(b) != "not a key" {
		t.Errorf("key file = %q, %v", b, err)
	}
	// The failed Start released the ID.
	if err := e.factory.Discard(id); err != nil {
		t.Errorf("Discard after failed Start: %v", err)
	}
}

func TestPersistentNeedsRoot(t *testing.T) {
	client, err := GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.AuthorizedKeys = []ssh.PublicKey{client.PublicKey()}
	cfg.Persistent = true
	if f, err := NewFactory(cfg); err == nil {
		_ = f.Close()
		t.Fatal("NewFactory accepted Persistent without Root")
	}
}
