// Package simvm simulates the guest side of cloud VMs for tests: each VM is
// an SSH server bound to its own loopback address (127.x.y.z) that runs
// commands in a per-VM sandbox directory, much as OpenSSH's sshd would run
// them on a real machine.
//
// The sandbox has shim executables (kubeadm, kubectl, hostnamectl, ...) on
// PATH that record what was asked of them. After every command the VM looks
// at the kubeadm join file and reports joins and resets through callbacks,
// which is how a simulated cluster learns that a node registered.
//
// The package needs a Unix host (process groups and signals); binding
// arbitrary 127.0.0.0/8 addresses works out of the box on Linux.
package simvm

import (
	"crypto/subtle"
	"errors"
	"fmt"
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
	// free port per VM (see VM.Addr); DefaultConfig uses 2222.
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
	// KeepSandboxes leaves sandbox directories behind on VM.Close for
	// post-mortem inspection.
	KeepSandboxes bool
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
	vms    map[*VM]struct{}
}

// NewFactory validates cfg and returns a Factory.
func NewFactory(cfg Config) (*Factory, error) {
	if len(cfg.AuthorizedKeys) == 0 && cfg.Password == "" {
		return nil, errors.New("simvm: need AuthorizedKeys or Password, refusing to run an open SSH server")
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("simvm: invalid port %d", cfg.Port)
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
	f := &Factory{cfg: cfg, log: cfg.Logger, authKeys: map[string]struct{}{}, vms: map[*VM]struct{}{}}
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
	} else if err := os.MkdirAll(cfg.Root, 0o755); err != nil {
		return nil, fmt.Errorf("simvm: create sandbox root: %w", err)
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
	// Env is added to every command's environment (e.g. NODE_NAME,
	// PROVIDER_ID, which the kubeadm shim uses as defaults).
	Env map[string]string
	// OnJoin is called after a command that left the VM joined under a
	// new node name or provider ID.
	OnJoin func(vmID, nodeName, providerID string)
	// OnReset is called after a command that removed the join (kubeadm
	// reset), with the node name the VM had joined as.
	OnReset func(vmID, nodeName string)
}

var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Start creates the VM's sandbox, generates its host key (and certificate)
// and starts its SSH server. The returned error wraps the listen error, so
// errors.Is(err, syscall.EADDRINUSE) tells a caller to try another IP.
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

	hostKey, err := GenerateSigner()
	if err != nil {
		return nil, fmt.Errorf("simvm: VM %s: %w", spec.ID, err)
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
			return nil, fmt.Errorf("simvm: VM %s: %w", spec.ID, err)
		}
		scfg.AddHostKey(certSigner)
	}

	sandbox := filepath.Join(f.cfg.Root, spec.ID)
	if err := prepareSandbox(sandbox, spec.Hostname); err != nil {
		return nil, fmt.Errorf("simvm: VM %s: %w", spec.ID, err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), fmt.Sprint(f.cfg.Port)))
	if err != nil {
		_ = os.RemoveAll(sandbox)
		return nil, fmt.Errorf("simvm: VM %s: listen: %w", spec.ID, err)
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
	if f.closed {
		f.mu.Unlock()
		_ = ln.Close()
		_ = os.RemoveAll(sandbox)
		return nil, errors.New("simvm: factory closed")
	}
	f.vms[v] = struct{}{}
	f.mu.Unlock()

	v.wg.Add(1)
	go v.serve()
	v.log.Debug("VM started")
	return v, nil
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

func (f *Factory) forget(v *VM) {
	f.mu.Lock()
	delete(f.vms, v)
	f.mu.Unlock()
}

// Close stops every VM still running and removes the sandbox root if the
// Factory created it.
func (f *Factory) Close() error {
	f.mu.Lock()
	f.closed = true
	vms := make([]*VM, 0, len(f.vms))
	for v := range f.vms {
		vms = append(vms, v)
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
