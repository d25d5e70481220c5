package simvm

import (
	"bufio"
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Paths inside a VM sandbox.
const (
	// JoinFile is where the kubeadm shim records a successful join,
	// relative to the sandbox root.
	JoinFile = "var/lib/kubelet/joined"
	// HostnameFile holds the VM's hostname (written by hostnamectl).
	HostnameFile = "etc/hostname"
	// LogDir holds one log file per shim (kubeadm.log, kubectl.log, ...).
	LogDir = "var/log/simvm"
	// HostKeyFile holds the VM's SSH host private key (OpenSSH format,
	// mode 0600), where sshd keeps it on a real machine.
	HostKeyFile = "etc/ssh/ssh_host_ed25519_key"
	// KubeletDefaultsFile is /etc/default/kubelet, which the kubelet's
	// systemd drop-in of the Debian/Ubuntu packages reads: a join hook
	// puts the providerID there (KUBELET_EXTRA_ARGS=--provider-id=...)
	// and the kubeadm shim reads it at join time, when the real kubelet
	// starts. Its directory exists in every sandbox, as on a real node.
	KubeletDefaultsFile = "etc/default/kubelet"
	// KubeletConfFile is /etc/kubernetes/kubelet.conf, written by a
	// successful join and removed by reset, as the real kubeadm does.
	KubeletConfFile = "etc/kubernetes/kubelet.conf"
	// KubeadmTokenFile and KubeadmCACertHashFile hold the bootstrap token
	// and the CA certificate hash a node image provides to its join hook
	// (see DevJoinToken and DevCACertHash).
	KubeadmTokenFile      = "etc/kubeadm/token"
	KubeadmCACertHashFile = "etc/kubeadm/ca-cert-hash"
	// DrainRequestFile is where the kubectl shim records each `kubectl
	// drain` (its arguments, one line per call); the VM hands them to
	// VMSpec.OnDrain when the command ends (see VM.runDrains).
	DrainRequestFile = "var/lib/simvm/drain-requests"
)

// DevJoinToken and DevCACertHash are the development bootstrap token and CA
// certificate hash every simulated VM's image carries in KubeadmTokenFile
// and KubeadmCACertHashFile. They are valid in form, which is all the
// kubeadm shim checks: the simulated cluster has no token to match.
const (
	DevJoinToken  = "abcdef.0123456789abcdef"
	DevCACertHash = "sha256:358eb75945ac55049197175aa3446a424545c8b48d0e94a671fdab00c4774e11"
)

// The shims are POSIX sh so they run under whatever /bin/sh the machine has.
// They only touch files under $SIMVM_SANDBOX.

const shimPreamble = `#!/bin/sh
# Installed by nodesmith simvm: a stand-in for the real tool that only
# records what was asked of it inside the VM sandbox.
set -u
sandbox="${SIMVM_SANDBOX:?SIMVM_SANDBOX is not set}"
mkdir -p "$sandbox/var/log/simvm"
printf '%s %s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(basename "$0")" "$*" >>"$sandbox/var/log/simvm/$(basename "$0").log"
`

// kubeadmScript is the simulated kubeadm, in a file of its own for its size.
//
//go:embed kubeadm.sh
var kubeadmScript string

var kubeadmShim = shimPreamble + kubeadmScript

const kubectlShim = shimPreamble + `
verb="${1:-}"
[ $# -gt 0 ] && shift
target=""
for a in "$@"; do
	case "$a" in
	-*) ;;
	*) if [ -z "$target" ]; then target="$a"; fi ;;
	esac
done
case "$verb" in
cordon) echo "node/$target cordoned" ;;
uncordon) echo "node/$target uncordoned" ;;
drain)
	# Recorded for VMSpec.OnDrain, which evicts the pods through the API
	# server before the command's exit status is reported.
	mkdir -p "$sandbox/var/lib/simvm"
	printf '%s\n' "$*" >>"$sandbox/var/lib/simvm/drain-requests"
	echo "node/$target cordoned"; echo "node/$target drained" ;;
delete) echo "node \"$target\" deleted" ;;
esac
exit 0
`

const hostnamectlShim = shimPreamble + `
file="$sandbox/etc/hostname"
verb=""
while [ $# -gt 0 ]; do
	case "$1" in
	-*) shift ;;
	*) verb="$1"; shift; break ;;
	esac
done
case "${verb:-status}" in
set-hostname|hostname)
	if [ $# -ge 1 ]; then
		printf '%s\n' "$1" >"$file"
	else
		cat "$file"
	fi ;;
status)
	echo " Static hostname: $(cat "$file")" ;;
*)
	echo "Unknown command verb '$verb'." >&2
	exit 1 ;;
esac
`

const hostnameShim = shimPreamble + `
if [ $# -ge 1 ]; then
	printf '%s\n' "$1" >"$sandbox/etc/hostname"
else
	cat "$sandbox/etc/hostname"
fi
`

// systemctl is often called by join hooks (enable --now kubelet); the
// simulation has no services, so it only logs.
const systemctlShim = shimPreamble + `
exit 0
`

var shims = map[string]string{
	"kubeadm":     kubeadmShim,
	"kubectl":     kubectlShim,
	"hostnamectl": hostnamectlShim,
	"hostname":    hostnameShim,
	"systemctl":   systemctlShim,
}

// prepareSandbox creates the sandbox directory tree with the shims and what
// a node image provides for joining (KubeadmTokenFile, KubeadmCACertHashFile,
// an /etc/default directory). A fresh sandbox starts otherwise empty. A reused one keeps its files (join state, hostname,
// host key, logs), as a rebooted machine keeps its disk; only the shims are
// reinstalled, like packages upgraded in place.
func prepareSandbox(dir, hostname string, reuse bool) error {
	if !reuse {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("clear sandbox: %w", err)
		}
	}
	for _, sub := range []string{"bin", "etc/ssh", "etc/default", "etc/kubeadm", "etc/kubernetes", "tmp", "var/lib/kubelet", LogDir} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return fmt.Errorf("create sandbox: %w", err)
		}
	}
	// What the node image provides for the join hook; a reused sandbox
	// keeps its own (the machine may have been given other ones).
	for _, f := range []struct{ path, content string }{
		{KubeadmTokenFile, DevJoinToken + "\n"},
		{KubeadmCACertHashFile, DevCACertHash + "\n"},
	} {
		p := filepath.Join(dir, f.path)
		if _, err := os.Stat(p); err == nil {
			continue
		}
		if err := os.WriteFile(p, []byte(f.content), 0o600); err != nil {
			return fmt.Errorf("create sandbox: %w", err)
		}
	}
	for name, body := range shims {
		// Replaced atomically, never rewritten in place; shims need no
		// durability (they are rewritten on every start).
		if err := writeFileAtomic(filepath.Join(dir, "bin", name), []byte(body), 0o755, false); err != nil {
			return fmt.Errorf("write shim %s: %w", name, err)
		}
	}
	hostnameFile := filepath.Join(dir, HostnameFile)
	if _, err := os.Stat(hostnameFile); reuse && err == nil {
		return nil // set by the machine itself (hostnamectl); keep it
	}
	if err := os.WriteFile(hostnameFile, []byte(hostname+"\n"), 0o644); err != nil {
		return fmt.Errorf("write hostname: %w", err)
	}
	return nil
}

// writeFileAtomic replaces path with data through a temporary file and a
// rename, so readers see the old or the new content, never a mix. With
// durable the data is fsynced first, so a crash cannot leave an empty file.
func writeFileAtomic(path string, data []byte, perm os.FileMode, durable bool) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if durable {
		return syncDir(filepath.Dir(path))
	}
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// JoinState is what the kubeadm shim recorded on a successful join.
type JoinState struct {
	NodeName   string
	ProviderID string
}

// readJoinFile parses the join file; ok is false if the VM is not joined.
func readJoinFile(sandbox string) (JoinState, bool, error) {
	b, err := os.ReadFile(filepath.Join(sandbox, JoinFile))
	if errors.Is(err, fs.ErrNotExist) {
		return JoinState{}, false, nil
	}
	if err != nil {
		return JoinState{}, false, fmt.Errorf("read join file: %w", err)
	}
	var js JoinState
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, found := strings.Cut(sc.Text(), "=")
		if !found {
			continue
		}
		switch k {
		case "node-name":
			js.NodeName = v
		case "provider-id":
			js.ProviderID = v
		}
	}
	if js.NodeName == "" {
		return JoinState{}, false, fmt.Errorf("join file without node-name: %q", b)
	}
	return js, true, nil
}
