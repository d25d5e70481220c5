package ssh

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/sshdtest"
)

func authorized(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

func TestHostKeyPolicies(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Options{})
	other := sshdtest.NewSigner(t).PublicKey() // a key the server does not have
	hostPattern := fmt.Sprintf("[127.0.0.1]:%d", srv.Port)
	otherLine := hostPattern + " " + authorized(other)
	elsewhere := fmt.Sprintf("[127.0.0.1]:%d %s", srv.Port+1, authorized(srv.HostKey))

	tests := []struct {
		name       string
		knownHosts []string // lines; nil means no known_hosts file
		tofu       bool
		pinned     string
		wantFail   domain.Failure
		wantReason string // in the error
		wantKey    string // HostKey reported
	}{
		{name: "known_hosts match", knownHosts: []string{srv.KnownHostsLine()}},
		{name: "known_hosts among other keys", knownHosts: []string{otherLine, srv.KnownHostsLine()}},
		{name: "changed host key refused", knownHosts: []string{otherLine}, wantFail: domain.FailureHostKey, wantReason: "does not match known_hosts"},
		{name: "changed host key refused despite tofu", knownHosts: []string{otherLine}, tofu: true, wantFail: domain.FailureHostKey, wantReason: "does not match known_hosts"},
		{name: "unknown host refused without tofu", knownHosts: []string{elsewhere}, wantFail: domain.FailureHostKey, wantReason: "not in known_hosts"},
		{name: "unknown host trusted on first use", knownHosts: []string{elsewhere}, tofu: true, wantKey: srv.AuthorizedKey()},
		{name: "tofu without known_hosts", tofu: true, wantKey: srv.AuthorizedKey()},
		{name: "revoked host key refused", knownHosts: []string{srv.KnownHostsLine(), "@revoked * " + authorized(srv.HostKey)}, tofu: true, wantFail: domain.FailureHostKey, wantReason: "revoked"},
		{name: "pinned key enforced", tofu: true, pinned: authorized(other), wantFail: domain.FailureHostKey, wantReason: "pinned"},
		{name: "pinned key wins over known_hosts", knownHosts: []string{srv.KnownHostsLine()}, pinned: authorized(other), wantFail: domain.FailureHostKey, wantReason: "pinned"},
		{name: "pinned key matches", tofu: true, pinned: srv.AuthorizedKey() + " comment", wantKey: srv.AuthorizedKey()},
		{name: "pinned key matches without tofu", knownHosts: []string{elsewhere}, pinned: srv.AuthorizedKey(), wantKey: srv.AuthorizedKey()},
		{name: "unparsable pin", tofu: true, pinned: "ssh-ed25519 not-base64", wantFail: domain.FailureInvalid, wantReason: "pinned host key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newExecutor(t, srv, func(o *Options) {
				o.TrustOnFirstUse = tt.tofu
				o.KnownHostsFiles = nil
				if tt.knownHosts != nil {
					o.KnownHostsFiles = []string{sshdtest.WriteFile(t, "known_hosts", strings.Join(tt.knownHosts, "\n")+"\n")}
				}
			})
			cmd := local("echo ok")
			cmd.PinnedHostKey = tt.pinned
			ex, out := run(t, e, cmd, time.Minute)
			if ex.Failure != tt.wantFail {
				t.Fatalf("failure %s (%v), want %s", ex.Failure, ex.Err, tt.wantFail)
			}
			if tt.wantFail == domain.FailureNone {
				if out.Stdout() != "ok\n" {
					t.Fatalf("stdout %q", out.Stdout())
				}
			} else {
				if ex.Failure.Retryable() {
					t.Errorf("%s failure is retryable", ex.Failure)
				}
				if !strings.Contains(ex.Err.Error(), tt.wantReason) {
					t.Errorf("error %q does not mention %q", ex.Err, tt.wantReason)
				}
				if ex.ConnectAttempts > 1 {
					t.Errorf("retried %d times a failure retrying cannot fix", ex.ConnectAttempts)
				}
				if ex.ExitCode != -1 {
					t.Errorf("exit code %d, want -1", ex.ExitCode)
				}
			}
			if ex.HostKey != tt.wantKey {
				t.Errorf("reported host key %q, want %q", ex.HostKey, tt.wantKey)
			}
		})
	}
}

func TestHostCertificates(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Options{HostCert: true})
	otherCA := sshdtest.NewSigner(t)
	otherCALine := fmt.Sprintf("@cert-authority [127.0.0.1]:%d %s", srv.Port, authorized(otherCA.PublicKey()))
	tests := []struct {
		name       string
		knownHosts []string
		tofu       bool
		pinned     string
		wantFail   domain.Failure
		wantReason string
		wantKey    string
	}{
		{name: "host CA accepted", knownHosts: []string{srv.CALine()}},
		{name: "wildcard host CA accepted", knownHosts: []string{fmt.Sprintf("@cert-authority [*]:%d %s", srv.Port, authorized(srv.HostCA.PublicKey()))}},
		{name: "CA and a plain line for another host", knownHosts: []string{fmt.Sprintf("[10.9.9.9]:%d %s", srv.Port, authorized(otherCA.PublicKey())), srv.CALine()}},
		{name: "untrusted CA refused", knownHosts: []string{otherCALine}, wantFail: domain.FailureHostKey, wantReason: "not in known_hosts"},
		{name: "untrusted CA but plain key known", knownHosts: []string{otherCALine, srv.KnownHostsLine()}},
		{name: "untrusted CA with tofu pins the plain key", knownHosts: []string{otherCALine}, tofu: true, wantKey: srv.AuthorizedKey()},
		{name: "revoked CA refused", knownHosts: []string{srv.CALine(), "@revoked * " + authorized(srv.HostCA.PublicKey())}, tofu: true, wantFail: domain.FailureHostKey, wantReason: "revoked"},
		{name: "pin compares the certified key", tofu: true, pinned: srv.AuthorizedKey(), wantKey: srv.AuthorizedKey()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newExecutor(t, srv, func(o *Options) {
				o.TrustOnFirstUse = tt.tofu
				o.KnownHostsFiles = []string{sshdtest.WriteFile(t, "known_hosts", strings.Join(tt.knownHosts, "\n")+"\n")}
			})
			cmd := local("echo ok")
			cmd.PinnedHostKey = tt.pinned
			ex, out := run(t, e, cmd, time.Minute)
			if ex.Failure != tt.wantFail {
				t.Fatalf("failure %s (%v), want %s", ex.Failure, ex.Err, tt.wantFail)
			}
			if tt.wantFail == domain.FailureNone && out.Stdout() != "ok\n" {
				t.Fatalf("stdout %q", out.Stdout())
			}
			if tt.wantFail != domain.FailureNone && !strings.Contains(ex.Err.Error(), tt.wantReason) {
				t.Errorf("error %q does not mention %q", ex.Err, tt.wantReason)
			}
			if ex.HostKey != tt.wantKey {
				t.Errorf("reported host key %q, want %q", ex.HostKey, tt.wantKey)
			}
		})
	}
}

func TestKnownHostsReloaded(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Options{})
	other := sshdtest.NewSigner(t).PublicKey()
	path := sshdtest.WriteFile(t, "known_hosts", fmt.Sprintf("[127.0.0.1]:%d %s\n", srv.Port, authorized(other)))
	e := newExecutor(t, srv, func(o *Options) { o.KnownHostsFiles = []string{path} })
	if ex, _ := run(t, e, local("true"), time.Minute); ex.Failure != domain.FailureHostKey {
		t.Fatalf("before the update: failure %s (%v), want host_key", ex.Failure, ex.Err)
	}
	// A rotated ConfigMap: new content (and size) in place.
	writeFileAtomic(t, path, srv.KnownHostsLine()+"\n# updated\n")
	if ex, _ := run(t, e, local("true"), time.Minute); ex.Failure != domain.FailureNone {
		t.Fatalf("after the update: failure %s (%v), want success", ex.Failure, ex.Err)
	}
}
