// Package ssh runs hook scripts on VMs over SSH with
// golang.org/x/crypto/ssh: the hook runner's ports.Executor.
//
// The script travels on the session's stdin to "sh -s" (or "bash -s"), with
// the environment exported at its top, so it needs neither scp/sftp nor
// sshd's AcceptEnv. Host keys are verified by known_hosts files (including
// @cert-authority host CAs), by a key pinned at first contact, or, when
// explicitly enabled, trusted on first use; never ignored.
package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/crypto/ssh"

	"github.com/nodesmith/nodesmith/libs/backoff"

	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/ports"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/telemetry"
)

var _ ports.Executor = (*Executor)(nil)

// Options configure an Executor. Secrets are file paths or in-memory values
// (from the environment or an embedding process); they are never logged.
type Options struct {
	// User to log in as (default root).
	User string
	// KeyFile is a private key (OpenSSH or PEM); KeyPassphraseFile holds
	// its passphrase if it is encrypted.
	KeyFile           string
	KeyPassphraseFile string
	// PasswordFile holds the login password.
	PasswordFile string
	// PrivateKey, KeyPassphrase and Password are the same secrets as
	// values; a file, when given, wins.
	PrivateKey    []byte
	KeyPassphrase []byte
	Password      []byte

	// KnownHostsFiles are OpenSSH known_hosts files; plain key lines and
	// @cert-authority / @revoked lines are honoured.
	KnownHostsFiles []string
	// TrustOnFirstUse accepts the key of a host that known_hosts does not
	// know (or every host, without known_hosts) when the command carries
	// no pinned key, and reports it for pinning.
	TrustOnFirstUse bool

	// DefaultPort is used when a command has none (default 22).
	DefaultPort int
	// ConnectTimeout bounds one TCP connect plus SSH handshake (default 10s).
	ConnectTimeout time.Duration
	// RetryInitial and RetryMax bound the jittered exponential backoff
	// between connection attempts (defaults 1s and 15s).
	RetryInitial, RetryMax time.Duration
	// KeepaliveInterval is how often an idle session is probed; a host that
	// leaves two probes unanswered is considered gone (default 30s).
	KeepaliveInterval time.Duration

	Logger *slog.Logger
}

func (o *Options) defaults() {
	if o.User == "" {
		o.User = "root"
	}
	if o.DefaultPort == 0 {
		o.DefaultPort = 22
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.RetryInitial <= 0 {
		o.RetryInitial = time.Second
	}
	if o.RetryMax < o.RetryInitial {
		o.RetryMax = max(15*time.Second, o.RetryInitial)
	}
	if o.KeepaliveInterval <= 0 {
		o.KeepaliveInterval = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Executor runs scripts over SSH. It is safe for concurrent use; every run
// has its own connection.
type Executor struct {
	o      Options
	log    *slog.Logger
	creds  *watched[credentials]
	policy *hostKeyPolicy
	// dialFn makes one connection attempt: e.dial, replaced in tests of
	// the retry loop.
	dialFn func(ctx context.Context, addr string, pinned ssh.PublicKey) (*ssh.Client, *verifier, error)
}

// New loads the credentials and known_hosts files now, so a bad
// configuration fails at start-up rather than on the first hook. Files are
// re-read when they change.
func New(o Options) (*Executor, error) {
	o.defaults()
	if len(o.KnownHostsFiles) == 0 && !o.TrustOnFirstUse {
		return nil, errors.New("no way to verify host keys: give known_hosts files or enable trust-on-first-use")
	}
	if o.DefaultPort < 1 || o.DefaultPort > 65535 {
		return nil, fmt.Errorf("invalid default port %d", o.DefaultPort)
	}
	log := o.Logger.With("component", "ssh")
	var secretFiles []string
	for _, f := range []string{o.KeyFile, o.KeyPassphraseFile, o.PasswordFile} {
		if f != "" {
			secretFiles = append(secretFiles, f)
		}
	}
	creds, err := newWatched("ssh credentials", secretFiles, log, func() (credentials, error) { return loadCredentials(o) })
	if err != nil {
		return nil, err
	}
	policy := &hostKeyPolicy{tofu: o.TrustOnFirstUse}
	if len(o.KnownHostsFiles) > 0 {
		files := append([]string(nil), o.KnownHostsFiles...)
		policy.known, err = newWatched("known_hosts", files, log, func() (*knownHosts, error) { return loadKnownHosts(files) })
		if err != nil {
			return nil, err
		}
	}
	e := &Executor{o: o, log: log, creds: creds, policy: policy}
	e.dialFn = e.dial
	return e, nil
}

// Run implements ports.Executor.
func (e *Executor) Run(ctx context.Context, cmd domain.Command, stdout, stderr io.Writer) domain.Execution {
	ex := domain.Execution{ExitCode: domain.NoExitCode}
	fail := func(f domain.Failure, err error) domain.Execution {
		ex.Failure, ex.Err = f, err
		return ex
	}
	// Re-validated here: an executor must never dial an empty address,
	// whoever calls it.
	h := domain.Hook{Host: cmd.Host, Port: cmd.Port, Env: cmd.Env}
	if err := h.Validate(); err != nil {
		return fail(domain.FailureInvalid, err)
	}
	sc, err := prepareScript(cmd.Script, cmd.Env)
	if err != nil {
		return fail(domain.FailureInvalid, err)
	}
	pinned, err := parsePinned(cmd.PinnedHostKey)
	if err != nil {
		return fail(domain.FailureInvalid, err)
	}
	port := cmd.Port
	if port == 0 {
		port = e.o.DefaultPort
	}
	addr := net.JoinHostPort(strings.Trim(cmd.Host, "[]"), strconv.Itoa(port))

	cctx, span := telemetry.Tracer().Start(ctx, "ssh connect", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("server.address", cmd.Host),
			attribute.Int("server.port", port),
			attribute.String("nodesmith.ssh_user", e.o.User),
			attribute.String("nodesmith.host_key_policy", e.policy.describe(pinned))))
	client, hostKey, attempts, f, err := e.connect(cctx, addr, pinned)
	span.SetAttributes(
		attribute.Int("nodesmith.connect_attempts", attempts),
		attribute.Bool("nodesmith.host_key_reported", hostKey != ""))
	endSpan(span, f, err)
	ex.ConnectAttempts, ex.HostKey = attempts, hostKey
	if err != nil {
		return fail(f, err)
	}
	ex.Connected = true
	defer client.Close()

	rctx, span := telemetry.Tracer().Start(ctx, "ssh run", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("server.address", cmd.Host), attribute.String("nodesmith.remote_command", sc.command)))
	code, f, err := e.execute(rctx, client, sc, stdout, stderr)
	span.SetAttributes(attribute.Int("nodesmith.exit_code", code))
	endSpan(span, f, err)
	ex.ExitCode = code
	if err != nil {
		return fail(f, err)
	}
	return ex
}

// endSpan records the outcome of a connection or a run on its span and
// ends it. Errors name hosts and causes, never credentials.
func endSpan(span trace.Span, f domain.Failure, err error) {
	result := "ok"
	if err != nil {
		result = f.String()
		span.RecordError(err)
		span.SetStatus(codes.Error, result)
	}
	span.SetAttributes(attribute.String("nodesmith.result", result))
	span.End()
}

// connect dials addr until it gets an SSH client, a failure that retrying
// cannot fix, or the end of ctx. It returns the accepted host key when it
// was trusted by pin or on first use.
//
// When the hook's deadline ends the attempts, the error names the deadline
// and the last meaningful cause (refused, unreachable, reset, ...): an
// attempt cut short by the deadline itself only says "i/o timeout", so it
// never replaces the cause an earlier attempt found.
func (e *Executor) connect(ctx context.Context, addr string, pinned ssh.PublicKey) (*ssh.Client, string, int, domain.Failure, error) {
	b := backoff.Policy{Initial: e.o.RetryInitial, Max: e.o.RetryMax}.New()
	var cause error
	for attempt := 1; ; attempt++ {
		client, v, err := e.dialFn(ctx, addr, pinned)
		if err == nil {
			return client, v.accepted, attempt, domain.FailureNone, nil
		}
		f, retry := classifyDialError(err, v, pinned)
		if f == domain.FailureHostKey || f == domain.FailureAuth {
			return nil, v.accepted, attempt, f, fmt.Errorf("connecting to %s: %w", addr, err)
		}
		if ctxEnded(ctx) {
			// The deadline (or a cancellation) cut this attempt short.
			if cause == nil {
				cause = err
			}
			return nil, v.accepted, attempt, ctxFailure(ctx), fmt.Errorf("connecting to %s: %w", addr, ctxError(ctx, attempt, cause))
		}
		cause = err
		trace.SpanFromContext(ctx).AddEvent("connection attempt failed", trace.WithAttributes(
			attribute.Int("nodesmith.connect_attempt", attempt),
			attribute.String("nodesmith.failure", f.String()),
			attribute.String("exception.message", err.Error())))
		if !retry {
			return nil, v.accepted, attempt, f, fmt.Errorf("connecting to %s: %w", addr, err)
		}
		// Jitter spreads the reconnects of many hooks whose VMs came
		// up together.
		wait := b.Next()
		e.log.Debug("ssh connection failed, retrying", "addr", addr, "attempt", attempt, "in", wait, "err", err)
		if backoff.Wait(ctx, wait) != nil {
			return nil, v.accepted, attempt, ctxFailure(ctx), fmt.Errorf("connecting to %s: %w", addr, ctxError(ctx, attempt, cause))
		}
	}
}

// deadlinePassed reports whether ctx's deadline has passed. It is true as
// soon as the clock reaches the deadline, before ctx's own timer has fired:
// a dial bounded by that deadline can return its timeout first.
func deadlinePassed(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// ctxEnded reports whether ctx was cancelled or its deadline has passed.
func ctxEnded(ctx context.Context) bool {
	return ctx.Err() != nil || deadlinePassed(ctx)
}

// ctxFailure classifies giving up on connecting because ctx ended: the
// hook's deadline means the host stayed unreachable (a connection failure,
// with the last error); a cancellation means the runner is stopping.
func ctxFailure(ctx context.Context) domain.Failure {
	if deadlinePassed(ctx) {
		return domain.FailureConnection
	}
	return domain.FailureCanceled
}

func ctxError(ctx context.Context, attempts int, cause error) error {
	if deadlinePassed(ctx) {
		return fmt.Errorf("no connection within the hook deadline after %d attempts: %w", attempts, cause)
	}
	return ctx.Err()
}

// dial makes one connection attempt bounded by ConnectTimeout (and ctx).
func (e *Executor) dial(ctx context.Context, addr string, pinned ssh.PublicKey) (*ssh.Client, *verifier, error) {
	v := e.policy.verifier(addr, pinned)
	actx, cancel := context.WithTimeout(ctx, e.o.ConnectTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(actx, "tcp", addr)
	if err != nil {
		return nil, v, err
	}
	// A half-up sshd can accept TCP and never finish the handshake: the
	// attempt's deadline covers the handshake too, and cancellation of ctx
	// interrupts it.
	if dl, ok := actx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(actx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	cfg := &ssh.ClientConfig{
		User:              e.o.User,
		Auth:              e.creds.get().authMethods(),
		HostKeyCallback:   v.callback,
		HostKeyAlgorithms: v.algorithms(conn.RemoteAddr()),
		ClientVersion:     "SSH-2.0-nodesmith-hook-runner",
	}
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	stopped := stop()
	if err != nil {
		_ = conn.Close()
		return nil, v, err
	}
	if !stopped {
		// ctx ended right as the handshake finished.
		_ = c.Close()
		return nil, v, actx.Err()
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(c, chans, reqs), v, nil
}

// classifyDialError decides the failure class of a connection attempt and
// whether another attempt may succeed: only network-level failures (refused,
// unreachable, reset, timed out, closed mid-handshake as sshd does while
// starting or under MaxStartups) are retried.
func classifyDialError(err error, v *verifier, pinned ssh.PublicKey) (domain.Failure, bool) {
	if v != nil && v.failure != nil {
		return domain.FailureHostKey, false
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "unable to authenticate"):
		// x/crypto reports refused credentials only as text.
		return domain.FailureAuth, false
	case pinned != nil && strings.Contains(msg, "no common algorithm for host key"):
		// The host no longer offers a key of the pinned type.
		return domain.FailureHostKey, false
	}
	var netErr net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EPIPE),
		errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr):
		return domain.FailureConnection, true
	}
	return domain.FailureConnection, false
}

// execute runs the prepared script on client and waits for it, its
// deadline, or the connection's death.
func (e *Executor) execute(ctx context.Context, client *ssh.Client, sc script, stdout, stderr io.Writer) (int, domain.Failure, error) {
	// Opening the session and starting the command wait for the server
	// without a deadline of their own: closing the connection when ctx
	// ends unblocks them.
	stopGuard := context.AfterFunc(ctx, func() { _ = client.Close() })
	setupFailed := func(what string, err error) (int, domain.Failure, error) {
		stopGuard()
		if ctx.Err() != nil {
			return domain.NoExitCode, ctxRunFailure(ctx), fmt.Errorf("%s: %w", what, ctx.Err())
		}
		return domain.NoExitCode, domain.FailureConnection, fmt.Errorf("%s: %w", what, err)
	}
	sess, err := client.NewSession()
	if err != nil {
		return setupFailed("opening ssh session", err)
	}
	defer sess.Close()
	sess.Stdout, sess.Stderr = stdout, stderr
	stdin, err := sess.StdinPipe()
	if err != nil {
		return setupFailed("opening ssh session stdin", err)
	}
	if err := sess.Start(sc.command); err != nil {
		return setupFailed("starting remote shell", err)
	}
	if !stopGuard() {
		// ctx ended as the command started; the connection is closing.
		_ = client.Close()
		return domain.NoExitCode, ctxRunFailure(ctx), fmt.Errorf("starting remote shell: %w", ctx.Err())
	}
	// stdin stays open after the script: the watchdog in the payload kills
	// the script when it closes (see prepareScript). A write error means
	// the shell already exited, which Wait reports.
	go func() { _, _ = io.WriteString(stdin, sc.payload) }()

	done := make(chan error, 1)
	go func() { done <- sess.Wait() }()
	lost := make(chan struct{})
	stopKeepalive := make(chan struct{})
	defer close(stopKeepalive)
	go e.keepalive(client, stopKeepalive, lost)

	select {
	case err := <-done:
		return exitResult(err)
	case <-ctx.Done():
		// Kill the process group (sshd and simvm deliver KILL to the
		// session's process group), then tear down: closing the
		// connection also triggers the payload's watchdog on servers that
		// ignore signal requests.
		_ = sess.Signal(ssh.SIGKILL)
		_ = sess.Close()
		_ = client.Close()
		e.drain(done)
		if ctxRunFailure(ctx) == domain.FailureTimeout {
			return domain.NoExitCode, domain.FailureTimeout, errors.New("hook deadline passed; the remote script was killed")
		}
		return domain.NoExitCode, domain.FailureCanceled, fmt.Errorf("remote script killed: %w", ctx.Err())
	case <-lost:
		_ = client.Close()
		e.drain(done)
		return domain.NoExitCode, domain.FailureConnection, errors.New("connection to the host was lost (keepalives unanswered) while the script ran")
	}
}

// drain waits for Session.Wait after the session was torn down. Its error
// then says nothing about the script (the outcome is already decided), so
// it is only logged for debugging.
func (e *Executor) drain(done <-chan error) {
	if err := <-done; err != nil {
		e.log.Debug("ssh session ended after teardown", "err", err)
	}
}

// ctxRunFailure classifies a run stopped by ctx once connected: the hook's
// deadline is a timeout, anything else the runner stopping.
func ctxRunFailure(ctx context.Context) domain.Failure {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return domain.FailureTimeout
	}
	return domain.FailureCanceled
}

// keepalive probes the connection; a VM that was terminated or cut off
// mid-script would otherwise hold the hook until its deadline.
func (e *Executor) keepalive(client *ssh.Client, stop <-chan struct{}, lost chan<- struct{}) {
	t := time.NewTicker(e.o.KeepaliveInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		replied := make(chan error, 1)
		go func() {
			// Any reply, even "unsupported", proves the peer is there.
			_, _, err := client.SendRequest("keepalive@openssh.com", true, nil)
			replied <- err
		}()
		select {
		case <-stop:
			return
		case err := <-replied:
			if err == nil {
				continue
			}
		case <-time.After(2 * e.o.KeepaliveInterval):
		}
		close(lost)
		return
	}
}

// exitResult maps Session.Wait's error to an exit code and failure class.
func exitResult(err error) (int, domain.Failure, error) {
	var exitErr *ssh.ExitError
	var missing *ssh.ExitMissingError
	switch {
	case err == nil:
		return 0, domain.FailureNone, nil
	case errors.As(err, &exitErr):
		if sig := exitErr.Signal(); sig != "" {
			return exitErr.ExitStatus(), domain.FailureExit, fmt.Errorf("script killed by signal %s", sig)
		}
		return exitErr.ExitStatus(), domain.FailureExit, fmt.Errorf("script exited with status %d", exitErr.ExitStatus())
	case errors.As(err, &missing):
		return domain.NoExitCode, domain.FailureConnection, errors.New("session ended without an exit status")
	default:
		return domain.NoExitCode, domain.FailureConnection, fmt.Errorf("session failed: %w", err)
	}
}
