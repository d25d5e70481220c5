package simvm

import (
	"bufio"
	"bytes"
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

const kubeadmShim = shimPreamble + `
joined="$sandbox/var/lib/kubelet/joined"
mkdir -p "$sandbox/var/lib/kubelet"

need_arg() {
	if [ "$1" -lt 2 ]; then
		echo "flag needs an argument: $2" >&2
		exit 1
	fi
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
join)
	node="${NODE_NAME:-}"
	provider="${PROVIDER_ID:-}"
	ignore=""
	while [ $# -gt 0 ]; do
		case "$1" in
		--node-name=*) node="${1#*=}" ;;
		--node-name) need_arg $# "$1"; node="$2"; shift ;;
		--provider-id=*) provider="${1#*=}" ;;
		--provider-id) need_arg $# "$1"; provider="$2"; shift ;;
		--ignore-preflight-errors=*) ignore="${1#*=}" ;;
		--ignore-preflight-errors) need_arg $# "$1"; ignore="$2"; shift ;;
		esac
		shift
	done
	if [ -z "$node" ]; then
		echo "error execution phase preflight: no node name: pass --node-name or set NODE_NAME" >&2
		exit 1
	fi
	case "$node" in
	*[!a-z0-9.-]*|-*|*-)
		echo "nodeRegistration.name: Invalid value: \"$node\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'" >&2
		exit 1 ;;
	esac
	case "$provider" in
	*"
"*) echo "invalid provider ID: contains a newline" >&2; exit 1 ;;
	esac
	echo "[preflight] Running pre-flight checks"
	if [ -f "$joined" ]; then
		case ",$ignore," in
		*,all,*|*,FileAvailable--etc-kubernetes-kubelet.conf,*) ;;
		*)
			echo "error execution phase preflight: [preflight] Some fatal errors occurred:" >&2
			echo "	[ERROR FileAvailable--etc-kubernetes-kubelet.conf]: /etc/kubernetes/kubelet.conf already exists" >&2
			echo "[preflight] If you know what you are doing, you can make a check non-fatal with '--ignore-preflight-errors=...'" >&2
			exit 1 ;;
		esac
	fi
	tmp="$joined.tmp.$$"
	printf 'node-name=%s\nprovider-id=%s\n' "$node" "$provider" >"$tmp" && mv -f "$tmp" "$joined" || exit 1
	echo "[kubelet-start] Starting the kubelet"
	echo "[kubelet-start] Waiting for the kubelet to perform the TLS Bootstrap"
	echo ""
	echo "This node has joined the cluster:"
	echo "* Certificate signing request was sent to apiserver and a response was received."
	echo "* The Kubelet was informed of the new secure connection details."
	;;
reset)
	rm -f "$joined"
	echo "[reset] Stopping the kubelet service"
	echo "[reset] Deleting contents of stateful directories: [/var/lib/kubelet]"
	;;
version)
	case " $* " in
	*short*) echo "v1.31.0" ;;
	*) echo 'kubeadm version: &version.Info{Major:"1", Minor:"31", GitVersion:"v1.31.0"}' ;;
	esac
	;;
*)
	echo "unknown command \"$cmd\" for \"kubeadm\" (the simulated kubeadm supports join, reset, version)" >&2
	exit 1 ;;
esac
`

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
drain) echo "node/$target cordoned"; echo "node/$target drained" ;;
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

// prepareSandbox creates the sandbox directory tree with the shims. A fresh
// sandbox starts empty. A reused one keeps its files (join state, hostname,
// host key, logs), as a rebooted machine keeps its disk; only the shims are
// reinstalled, like packages upgraded in place.
func prepareSandbox(dir, hostname string, reuse bool) error {
	if !reuse {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("clear sandbox: %w", err)
		}
	}
	for _, sub := range []string{"bin", "etc/ssh", "tmp", "var/lib/kubelet", LogDir} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
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
