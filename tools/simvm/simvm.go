// Package simvm simulates the guest side of cloud VMs for tests: each VM is
// an SSH server bound to its own loopback address (127.x.y.z) that runs
// commands in a per-VM sandbox directory, much as OpenSSH's sshd would run
// them on a real machine.
//
// The sandbox has shim executables (kubeadm, kubectl, hostnamectl, ...) on
// PATH that record what was asked of them. The kubeadm shim is as strict as
// the real kubeadm (see kubeadm.sh), so a join hook that works on a simulated
// VM works on a real one. After every command the VM looks at the kubeadm
// join file and reports joins and resets through callbacks, which is how a
// simulated cluster learns that a node registered.
//
// With Config.Persistent a VM's sandbox, host key included, outlives the
// process: a VM started again with the same ID after a restart is the same
// machine to its clients.
//
// The package needs a Unix host (process groups and signals); binding
// arbitrary 127.0.0.0/8 addresses works out of the box on Linux.
package simvm

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// Config configures a Factory. Start from DefaultConfig.
type Config struct {
	// Root is the directory holding one sandbox directory per VM. Empty
	// means a temporary directory owned (and removed) by the Factory.
	Root string
	// Port is the SSH port every VM listens on at its own IP. 0 picks a
	// free port per VM (see VM.Addr); DefaultConfig uses 2222. Only a fixed
	// port gives a VM the same address after a restart (Persistent).
	Port int
	// User is the only accepted login name. Empty means "root".
	User string
	// AuthorizedKeys are the client public keys accepted for User.
	AuthorizedKeys []ssh.PublicKey
	// Password, if not empty, is accepted for User as well.
	Password string
	// HostCA, if set, signs a host certificate for every VM's host key, so
	// clients can trust all VMs with one "@cert-authority" known_hosts line.
	HostCA ssh.Signer
	// MaxSessions bounds concurrent sessions per VM (across connections);
	// further session channels are rejected. 0 means 10, like sshd.
	MaxSessions int
	// OrphanGrace is how long a finished command's background children may
	// keep its output open before they are killed. 0 means 1s.
	OrphanGrace time.Duration
	// KeepSandboxes leaves sandbox directories behind on VM.Close,
	// VM.Destroy and Factory.Discard for post-mortem inspection.
	KeepSandboxes bool
	// Persistent makes VMs survive a restart of the process: VM.Close and
	// Factory.Close keep each sandbox (its files, its join state and its
	// host key, see HostKeyFile), and Start reuses the sandbox of an
	// earlier VM with the same ID instead of wiping it, so clients that
	// pinned the VM's host key still connect. When the reused sandbox
	// records a join, Start calls OnJoin before returning: the kubelet
	// coming back registers the node again. Use VM.Destroy or
	// Factory.Discard for VMs that are gone for good, and pair it with a
	// caller that remembers its VMs across restarts (cvmemu's
	// Config.StateFile); otherwise sandboxes pile up. Requires Root.
	Persistent bool
	// Logger receives connection and command logs. Nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns a Config with port 2222 and user root; callers still
// have to provide AuthorizedKeys and/or Password.
func DefaultConfig() Config {
	return Config{Port: 2222, User: "root"}
}

// Factory starts simulated VMs sharing one configuration.
type Factory struct {
	cfg      Config
	log      *slog.Logger
	ownsRoot bool
	authKeys map[string]struct{}

	mu     sync.Mutex
	closed bool
	// vms holds the VMs by ID; a nil value reserves the ID for a Start in
	// progress, so two VMs never share a sandbox.
	vms map[string]*VM
}

// NewFactory validates cfg and returns a Factory.
func NewFactory(cfg Config) (*Factory, error) {
	if len(cfg.AuthorizedKeys) == 0 && cfg.Password == "" {
		return nil, errors.New("simvm: need AuthorizedKeys or Password, refusing to run an open SSH server")
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("simvm: invalid port %d", cfg.Port)
	}
	if cfg.Persistent && cfg.Root == "" {
		return nil, errors.New("simvm: Persistent needs a Root that outlives the process")
	}
	if cfg.User == "" {
		cfg.User = "root"
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 10
	}
	if cfg.OrphanGrace <= 0 {
		cfg.OrphanGrace = time.Second
	}
	f := &Factory{cfg: cfg, log: cfg.Logger, authKeys: map[string]struct{}{}, vms: map[string]*VM{}}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	for _, k := range cfg.AuthorizedKeys {
		f.authKeys[string(k.Marshal())] = struct{}{}
	}
	if cfg.Root == "" {
		dir, err := os.MkdirTemp("", "simvm-")
		if err != nil {
			return nil, fmt.Errorf("simvm: create sandbox root: %w", err)
		}
		f.cfg.Root, f.ownsRoot = dir, true
	} else {
		// Commands run with the sandbox as their working directory, so a
		// relative root would make the PATH entry for the shims dangle.
		abs, err := filepath.Abs(cfg.Root)
		if err != nil {
			return nil, fmt.Errorf("simvm: sandbox root %s: %w", cfg.Root, err)
		}
		f.cfg.Root = abs
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return nil, fmt.Errorf("simvm: create sandbox root: %w", err)
		}
	}
	return f, nil
}

// Root returns the directory holding the VM sandboxes.
func (f *Factory) Root() string { return f.cfg.Root }

// VMSpec describes one VM to start.
type VMSpec struct {
	// ID names the VM (e.g. "ins-abcd1234") and its sandbox directory.
	ID string
	// IP is the address the SSH server binds, normally from 127.0.0.0/8.
	IP string
	// Hostname is the initial hostname; empty means ID.
	Hostname string
	// Env is added to every command's environment. The kubeadm shim reads
	// none of it, like the real kubeadm: the node name defaults to the
	// hostname, the providerID comes from KubeletDefaultsFile or a
	// JoinConfiguration.
	Env map[string]string
	// OnJoin is called after a command that left the VM joined under a
	// new node name or provider ID, and by Start when a reused sandbox
	// (Config.Persistent) records a join.
	OnJoin func(vmID, nodeName, providerID string)
	// OnReset is called after a command that removed the join (kubeadm
	// reset), with the node name the VM had joined as.
	OnReset func(vmID, nodeName string)
	// OnDrain, when set, performs the `kubectl drain` calls of a command
	// (args: the arguments after "drain") after the command ends and
	// before its exit status is reported and a reset is seen, so a drain
	// is done once the client sees the command finish, as with the real
	// kubectl, which blocks until the pods are evicted. An error is
	// written to the command's stderr and turns a success into exit
	// status 1. Without it a drain only prints what kubectl would.
	OnDrain func(vmID string, args []string) error
}

var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ErrRunning is returned (wrapped) for an ID whose VM is running.
var ErrRunning = errors.New("VM is running")

// Start creates the VM's sandbox (or, with Config.Persistent, reuses the
// one an earlier VM with this ID left), generates or loads its host key (and
// signs a certificate) and starts its SSH server. The returned error wraps
// the listen error, so errors.Is(err, syscall.EADDRINUSE) tells a caller to
// try another IP; it wraps ErrRunning if a VM with this ID runs already.
func (f *Factory) Start(spec VMSpec) (*VM, error) {
	if !validID.MatchString(spec.ID) {
		return nil, fmt.Errorf("simvm: invalid VM id %q", spec.ID)
	}
	ip := net.ParseIP(spec.IP)
	if ip == nil {
		return nil, fmt.Errorf("simvm: VM %s: invalid IP %q", spec.ID, spec.IP)
	}
	if spec.Hostname == "" {
		spec.Hostname = spec.ID
	}
	if err := f.reserve(spec.ID); err != nil {
		return nil, err
	}
	v, reused, err := f.start(spec, ip)
	if err != nil {
		f.mu.Lock()
		delete(f.vms, spec.ID)
		f.mu.Unlock()
		return nil, err
	}
	v.wg.Add(1)
	go v.serve()
	v.log.Debug("VM started", "reusedSandbox", reused)
	if reused {
		// The machine comes back with its disk: a recorded join means
		// its kubelet starts again and registers the node.
		v.checkJoin()
	}
	return v, nil
}

// reserve claims id for a Start in progress.
func (f *Factory) reserve(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errors.New("simvm: factory closed")
	}
	if _, ok := f.vms[id]; ok {
		return fmt.Errorf("simvm: VM %s: %w", id, ErrRunning)
	}
	f.vms[id] = nil
	return nil
}

// start prepares the sandbox and the SSH server of a reserved VM and
// registers it. On error nothing is left behind but a reused sandbox.
func (f *Factory) start(spec VMSpec, ip net.IP) (_ *VM, reused bool, err error) {
	sandbox := filepath.Join(f.cfg.Root, spec.ID)
	if f.cfg.Persistent {
		fi, serr := os.Stat(sandbox)
		switch {
		case serr == nil && fi.IsDir():
			reused = true
		case serr == nil:
			return nil, false, fmt.Errorf("simvm: VM %s: sandbox %s is not a directory", spec.ID, sandbox)
		case !errors.Is(serr, fs.ErrNotExist):
			return nil, false, fmt.Errorf("simvm: VM %s: %w", spec.ID, serr)
		}
	}
	if err := prepareSandbox(sandbox, spec.Hostname, reused); err != nil {
		return nil, false, fmt.Errorf("simvm: VM %s: %w", spec.ID, err)
	}
	defer func() {
		// A fresh sandbox of a VM that never ran is garbage; a reused one
		// is still the machine's disk (and the evidence if it is broken).
		if err != nil && !reused {
			_ = os.RemoveAll(sandbox)
		}
	}()

	hostKey, err := loadOrCreateHostKey(sandbox, spec.ID, reused)
	if err != nil {
		return nil, reused, fmt.Errorf("simvm: VM %s: %w", spec.ID, err)
	}
	scfg := &ssh.ServerConfig{
		ServerVersion:     "SSH-2.0-OpenSSH_9.6 nodesmith-simvm",
		PublicKeyCallback: f.checkPublicKey,
	}
	if f.cfg.Password != "" {
		scfg.PasswordCallback = f.checkPassword
	}
	scfg.AddHostKey(hostKey)
	if f.cfg.HostCA != nil {
		principals := []string{ip.String(), spec.Hostname, spec.ID}
		certSigner, err := signHostCert(f.cfg.HostCA, hostKey, spec.ID, principals)
		if err != nil {
			return nil, reused, fmt.Errorf("simvm: VM %s: %w", spec.ID, err)
		}
		scfg.AddHostKey(certSigner)
	}

	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), fmt.Sprint(f.cfg.Port)))
	if err != nil {
		return nil, reused, fmt.Errorf("simvm: VM %s: listen: %w", spec.ID, err)
	}
	v := &VM{
		f:       f,
		spec:    spec,
		log:     f.log.With("vm", spec.ID, "addr", ln.Addr().String()),
		sandbox: sandbox,
		hostKey: hostKey.PublicKey(),
		scfg:    scfg,
		ln:      ln,
		sem:     make(chan struct{}, f.cfg.MaxSessions),
		conns:   map[net.Conn]struct{}{},
		done:    make(chan struct{}),
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		_ = ln.Close()
		return nil, reused, errors.New("simvm: factory closed")
	}
	f.vms[spec.ID] = v
	return v, reused, nil
}

func (f *Factory) checkPublicKey(c ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	if c.User() != f.cfg.User {
		return nil, fmt.Errorf("unknown user %q", c.User())
	}
	if _, ok := f.authKeys[string(key.Marshal())]; !ok {
		return nil, errors.New("public key not authorized")
	}
	return &ssh.Permissions{}, nil
}

func (f *Factory) checkPassword(c ssh.ConnMetadata, pw []byte) (*ssh.Permissions, error) {
	userOK := subtle.ConstantTimeCompare([]byte(c.User()), []byte(f.cfg.User)) == 1
	pwOK := subtle.ConstantTimeCompare(pw, []byte(f.cfg.Password)) == 1
	if !userOK || !pwOK {
		return nil, errors.New("authentication failed")
	}
	return &ssh.Permissions{}, nil
}

// release unregisters a stopped VM and, if remove is set, deletes its
// sandbox, unless a VM with the same ID was started again meanwhile (the
// sandbox is then that VM's disk).
func (f *Factory) release(v *VM, remove bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.vms[v.spec.ID] == v {
		delete(f.vms, v.spec.ID)
	}
	if _, running := f.vms[v.spec.ID]; running || !remove {
		return nil
	}
	if err := os.RemoveAll(v.sandbox); err != nil {
		return fmt.Errorf("simvm: remove sandbox of VM %s: %w", v.spec.ID, err)
	}
	return nil
}

// Discard removes the sandbox a stopped VM left behind (Config.Persistent),
// for a VM that is gone for good while it was not running, e.g. terminated
// before its SSH server came back after a restart. It is a no-op if there is
// no such sandbox or Config.KeepSandboxes is set, and fails with ErrRunning
// if a VM with this ID is running.
func (f *Factory) Discard(id string) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("simvm: invalid VM id %q", id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.vms[id]; ok {
		return fmt.Errorf("simvm: discard VM %s: %w", id, ErrRunning)
	}
	if f.cfg.KeepSandboxes {
		return nil
	}
	if err := os.RemoveAll(filepath.Join(f.cfg.Root, id)); err != nil {
		return fmt.Errorf("simvm: discard VM %s: %w", id, err)
	}
	return nil
}

// Close stops every VM still running (see VM.Close: with Persistent their
// sandboxes stay) and removes the sandbox root if the Factory created it.
func (f *Factory) Close() error {
	f.mu.Lock()
	f.closed = true
	vms := make([]*VM, 0, len(f.vms))
	for _, v := range f.vms {
		if v != nil { // nil: a Start in progress, which will see closed
			vms = append(vms, v)
		}
	}
	f.mu.Unlock()
	var errs []error
	for _, v := range vms {
		errs = append(errs, v.Close())
	}
	if f.ownsRoot && !f.cfg.KeepSandboxes {
		if err := os.RemoveAll(f.cfg.Root); err != nil {
			errs = append(errs, fmt.Errorf("simvm: remove sandbox root: %w", err))
		}
	}
	return errors.Join(errs...)
}
