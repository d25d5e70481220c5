package simvm

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// handshakeTimeout bounds how long a connection may take to authenticate, so
// a stuck client cannot pin a goroutine forever.
const handshakeTimeout = 30 * time.Second

// maxExecHistory bounds the per-VM command history kept for inspection.
const maxExecHistory = 256

// VM is one running simulated machine.
type VM struct {
	f       *Factory
	spec    VMSpec
	log     *slog.Logger
	sandbox string
	hostKey ssh.PublicKey
	scfg    *ssh.ServerConfig
	ln      net.Listener
	// sem bounds concurrent sessions; a full channel means "at limit".
	sem chan struct{}
	wg  sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	done     chan struct{}
	conns    map[net.Conn]struct{}
	history  []ExecRecord
	sessions int

	// joinMu serialises join-file checks so callbacks fire in order.
	joinMu sync.Mutex
	joined *JoinState
	// drainMu serialises the drain requests of concurrent commands.
	drainMu sync.Mutex
}

// ExecRecord describes one finished command.
type ExecRecord struct {
	Command    string
	ExitStatus int    // -1 if killed by a signal
	Signal     string // signal name without "SIG", if killed by one
	Started    time.Time
	Ended      time.Time
}

// ID returns the VM id.
func (v *VM) ID() string { return v.spec.ID }

// IP returns the IP address the VM's SSH server is bound to.
func (v *VM) IP() string { return v.spec.IP }

// Addr returns the SSH server's host:port.
func (v *VM) Addr() string { return v.ln.Addr().String() }

// Sandbox returns the VM's sandbox directory (its "filesystem root" and HOME).
func (v *VM) Sandbox() string { return v.sandbox }

// HostKey returns the VM's plain host public key.
func (v *VM) HostKey() ssh.PublicKey { return v.hostKey }

// Hostname returns the hostname currently recorded in the sandbox.
func (v *VM) Hostname() string {
	b, err := os.ReadFile(filepath.Join(v.sandbox, HostnameFile))
	if err != nil {
		return v.spec.Hostname
	}
	return strings.TrimSpace(string(b))
}

// Joined returns the join state as of the last finished command.
func (v *VM) Joined() (JoinState, bool) {
	v.joinMu.Lock()
	defer v.joinMu.Unlock()
	if v.joined == nil {
		return JoinState{}, false
	}
	return *v.joined, true
}

// History returns the most recent finished commands, oldest first.
func (v *VM) History() []ExecRecord {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]ExecRecord(nil), v.history...)
}

// ActiveSessions returns the number of open session channels.
func (v *VM) ActiveSessions() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.sessions
}

// Close stops the SSH server, disconnects all clients, kills every running
// command's process group and waits for all of it to finish. The sandbox is
// removed unless Config.Persistent or Config.KeepSandboxes is set.
func (v *VM) Close() error { return v.stop(!v.f.cfg.Persistent) }

// Destroy stops the VM like Close and removes its sandbox, host key
// included, even with Config.Persistent (but not with KeepSandboxes): for a
// VM that is gone for good, such as a terminated instance. It may follow a
// Close.
func (v *VM) Destroy() error { return v.stop(true) }

func (v *VM) stop(removeSandbox bool) error {
	v.mu.Lock()
	var err error
	if !v.closed {
		v.closed = true
		close(v.done)
		err = v.ln.Close()
		for c := range v.conns {
			_ = c.Close() // ends the sessions, which kill their processes
		}
		v.log.Debug("VM stopping")
	}
	v.mu.Unlock()

	v.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return errors.Join(err, v.f.release(v, removeSandbox && !v.f.cfg.KeepSandboxes))
}

func (v *VM) serve() {
	defer v.wg.Done()
	for {
		nc, err := v.ln.Accept()
		if err != nil {
			select {
			case <-v.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			v.log.Error("accept failed, SSH server stopping", "err", err)
			return
		}
		v.mu.Lock()
		if v.closed {
			v.mu.Unlock()
			_ = nc.Close()
			return
		}
		v.conns[nc] = struct{}{}
		v.wg.Add(1)
		v.mu.Unlock()
		go v.handleConn(nc)
	}
}

func (v *VM) handleConn(nc net.Conn) {
	defer v.wg.Done()
	defer func() {
		_ = nc.Close()
		v.mu.Lock()
		delete(v.conns, nc)
		v.mu.Unlock()
	}()

	_ = nc.SetDeadline(time.Now().Add(handshakeTimeout))
	sconn, chans, reqs, err := ssh.NewServerConn(nc, v.scfg)
	if err != nil {
		v.log.Debug("SSH handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
		return
	}
	_ = nc.SetDeadline(time.Time{})
	log := v.log.With("remote", nc.RemoteAddr().String(), "user", sconn.User())
	log.Debug("SSH connection established")
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		ssh.DiscardRequests(reqs) // keepalives etc.: replied false, like sshd for unknown ones
	}()

	var sessions sync.WaitGroup
	for nch := range chans {
		if nch.ChannelType() != "session" {
			_ = nch.Reject(ssh.UnknownChannelType, "only session channels are supported")
			continue
		}
		select {
		case v.sem <- struct{}{}:
		default:
			_ = nch.Reject(ssh.ResourceShortage, "too many sessions")
			continue
		}
		ch, chReqs, err := nch.Accept()
		if err != nil {
			<-v.sem
			continue
		}
		v.mu.Lock()
		v.sessions++
		v.mu.Unlock()
		sessions.Add(1)
		go func() {
			defer sessions.Done()
			defer func() {
				v.mu.Lock()
				v.sessions--
				v.mu.Unlock()
				<-v.sem
			}()
			v.handleSession(log, ch, chReqs)
		}()
	}
	// chans closes when the connection dies; sessions notice through their
	// request channels and kill their processes.
	sessions.Wait()
	log.Debug("SSH connection closed")
}

// checkJoin compares the join file with the last known state and fires the
// callbacks on change. Called after every command.
func (v *VM) checkJoin() {
	v.joinMu.Lock()
	defer v.joinMu.Unlock()
	js, ok, err := readJoinFile(v.sandbox)
	if err != nil {
		v.log.Warn("unreadable join file", "err", err)
		return
	}
	switch {
	case ok && (v.joined == nil || *v.joined != js):
		v.joined = &js
		v.log.Info("VM joined the cluster", "node", js.NodeName, "providerID", js.ProviderID)
		if v.spec.OnJoin != nil {
			v.spec.OnJoin(v.spec.ID, js.NodeName, js.ProviderID)
		}
	case !ok && v.joined != nil:
		prev := *v.joined
		v.joined = nil
		v.log.Info("VM reset (left the cluster)", "node", prev.NodeName)
		if v.spec.OnReset != nil {
			v.spec.OnReset(v.spec.ID, prev.NodeName)
		}
	}
}

func (v *VM) record(r ExecRecord) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.history) >= maxExecHistory {
		v.history = append(v.history[:0], v.history[1:]...)
	}
	v.history = append(v.history, r)
}

// runDrains takes the `kubectl drain` calls the kubectl shim recorded
// (DrainRequestFile) and performs them in order through VMSpec.OnDrain;
// it returns the first error. Without OnDrain the requests are dropped.
// Called after every command, before the join check, so a drain comes
// before the reset that usually follows it in the same script.
func (v *VM) runDrains() error {
	v.drainMu.Lock()
	defer v.drainMu.Unlock()
	path := filepath.Join(v.sandbox, DrainRequestFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("drain requests: %w", err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("drain requests: %w", err)
	}
	if v.spec.OnDrain == nil {
		return nil
	}
	var first error
	for line := range strings.Lines(string(b)) {
		args := strings.Fields(line)
		if len(args) == 0 {
			continue
		}
		if err := v.spec.OnDrain(v.spec.ID, args); err != nil {
			v.log.Warn("drain failed", "args", args, "err", err)
			if first == nil {
				first = err
			}
		}
	}
	return first
}
