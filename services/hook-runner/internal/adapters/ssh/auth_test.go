package ssh

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/subtle"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/sshdtest"
)

func newSigner(t *testing.T) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestKeyAuthentication(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Options{})
	t.Run("key file", func(t *testing.T) {
		e := newExecutor(t, srv, nil)
		if ex, out := run(t, e, local("id -un"), time.Minute); ex.Failure != domain.FailureNone || out.Stdout() != srv.User+"\n" {
			t.Fatalf("failure %s (%v), stdout %q", ex.Failure, ex.Err, out.Stdout())
		}
	})
	t.Run("encrypted key file with passphrase file", func(t *testing.T) {
		e := newExecutor(t, srv, func(o *Options) {
			o.KeyFile = srv.ClientKeyFile(t, "correct horse")
			o.KeyPassphraseFile = sshdtest.WriteFile(t, "passphrase", "correct horse\n")
		})
		if ex, _ := run(t, e, local("true"), time.Minute); ex.Failure != domain.FailureNone {
			t.Fatalf("failure %s (%v)", ex.Failure, ex.Err)
		}
	})
	t.Run("key as a value", func(t *testing.T) {
		e := newExecutor(t, srv, func(o *Options) {
			o.KeyFile = ""
			o.PrivateKey = []byte(readFile(t, srv.ClientKeyFile(t, "pw")))
			o.KeyPassphrase = []byte("pw")
		})
		if ex, _ := run(t, e, local("true"), time.Minute); ex.Failure != domain.FailureNone {
			t.Fatalf("failure %s (%v)", ex.Failure, ex.Err)
		}
	})
	t.Run("unauthorized key is an auth failure, not retried", func(t *testing.T) {
		e := newExecutor(t, srv, func(o *Options) {
			o.KeyFile = ""
			o.PrivateKey = randomKeyPEM(t)
		})
		ex, _ := run(t, e, local("true"), time.Minute)
		if ex.Failure != domain.FailureAuth || ex.Failure.Retryable() || ex.ConnectAttempts != 1 || ex.ExitCode != -1 {
			t.Fatalf("failure %s (%v) after %d attempts, want auth after 1", ex.Failure, ex.Err, ex.ConnectAttempts)
		}
	})
	t.Run("wrong user", func(t *testing.T) {
		e := newExecutor(t, srv, func(o *Options) { o.User = "no-such-user-nodesmith" })
		if ex, _ := run(t, e, local("true"), time.Minute); ex.Failure != domain.FailureAuth {
			t.Fatalf("failure %s (%v), want auth", ex.Failure, ex.Err)
		}
	})
}

func TestCredentialErrorsFailAtStart(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Options{})
	encrypted := srv.ClientKeyFile(t, "secret-pass")
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"no credentials", Options{TrustOnFirstUse: true}, "no ssh credentials"},
		{"no host key policy", Options{Password: []byte("x")}, "verify host keys"},
		{"missing key file", Options{TrustOnFirstUse: true, KeyFile: "/nonexistent/key"}, "/nonexistent/key"},
		{"missing known_hosts", Options{Password: []byte("x"), KnownHostsFiles: []string{"/nonexistent/known_hosts"}}, "known_hosts"},
		{"encrypted key without passphrase", Options{TrustOnFirstUse: true, KeyFile: encrypted}, "encrypted"},
		{"wrong passphrase", Options{TrustOnFirstUse: true, KeyFile: encrypted, KeyPassphrase: []byte("nope")}, "passphrase"},
		{"garbage key", Options{TrustOnFirstUse: true, PrivateKey: []byte("not a key")}, "parsing ssh private key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want an error about %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "secret-pass") {
				t.Fatalf("error leaks the passphrase: %v", err)
			}
		})
	}
}

// TestPasswordAuthenticationAgainstOpenSSH logs in to the real sshd by
// password as a throwaway local account (see sshdtest.Options.Password;
// skipped unless the tests run as root).
func TestPasswordAuthenticationAgainstOpenSSH(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Options{Password: true})
	passwordOnly := func(o *Options) {
		o.User = srv.PasswordUser
		o.KeyFile = ""
	}
	env := map[string]string{"GREETING": `it's "quoted"`, "NODE_NAME": "node-pw"}
	script := `id -un
printf '%s|%s\n' "$GREETING" "$(sh -c 'echo $NODE_NAME')"
echo to-stderr >&2
exit 3`
	tests := []struct {
		name   string
		mutate func(*Options)
	}{
		{"password from file", func(o *Options) {
			passwordOnly(o)
			o.PasswordFile = sshdtest.WriteFile(t, "pw", srv.Password+"\n")
		}},
		{"password as value", func(o *Options) {
			passwordOnly(o)
			o.Password = []byte(srv.Password)
		}},
		{"key refused first, then password", func(o *Options) {
			passwordOnly(o)
			o.PrivateKey = randomKeyPEM(t)
			o.Password = []byte(srv.Password)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newExecutor(t, srv, tt.mutate)
			cmd := local(script)
			cmd.Env = env
			ex, out := run(t, e, cmd, time.Minute)
			if ex.Failure != domain.FailureExit || ex.ExitCode != 3 || !ex.Connected || ex.ConnectAttempts != 1 {
				t.Fatalf("failure %s (%v), exit %d, connected %v after %d attempts; want exit 3 after 1 attempt; stderr %q",
					ex.Failure, ex.Err, ex.ExitCode, ex.Connected, ex.ConnectAttempts, out.Stderr())
			}
			if want := srv.PasswordUser + "\nit's \"quoted\"|node-pw\n"; out.Stdout() != want {
				t.Errorf("stdout = %q, want %q", out.Stdout(), want)
			}
			if out.Stderr() != "to-stderr\n" {
				t.Errorf("stderr = %q", out.Stderr())
			}
		})
	}
	// sshd says which method let the account in: password, not a key.
	if n := strings.Count(srv.Logs(), "Accepted password for "+srv.PasswordUser); n != len(tests) {
		t.Errorf("sshd accepted %d password logins, want %d; log:\n%s", n, len(tests), srv.Logs())
	}

	t.Run("wrong password is an auth failure, not retried", func(t *testing.T) {
		e := newExecutor(t, srv, func(o *Options) {
			passwordOnly(o)
			o.Password = []byte("not-" + srv.Password)
		})
		ex, _ := run(t, e, local("true"), time.Minute)
		if ex.Failure != domain.FailureAuth || ex.Failure.Retryable() || ex.ConnectAttempts != 1 || ex.ExitCode != -1 {
			t.Fatalf("failure %s (%v) after %d attempts, want auth after 1", ex.Failure, ex.Err, ex.ConnectAttempts)
		}
		if strings.Contains(ex.Err.Error(), srv.Password) {
			t.Fatalf("error leaks the password: %v", ex.Err)
		}
	})
	t.Run("root may not log in by password", func(t *testing.T) {
		if srv.User != "root" {
			t.Skip("only meaningful when the tests run as root")
		}
		e := newExecutor(t, srv, func(o *Options) {
			o.KeyFile = ""
			o.Password = []byte(srv.Password)
		})
		if ex, _ := run(t, e, local("true"), time.Minute); ex.Failure != domain.FailureAuth {
			t.Fatalf("failure %s (%v), want auth", ex.Failure, ex.Err)
		}
	})
}

// TestPasswordAuthentication runs against the in-process server (see
// goServer): keyboard-interactive, which sshd offers only through PAM, and
// password without needing root to create an account.
func TestPasswordAuthentication(t *testing.T) {
	const password = "s3cret 'pw'"
	check := func(user string, pw []byte) error {
		if user == "root" && subtle.ConstantTimeCompare(pw, []byte(password)) == 1 {
			return nil
		}
		return errors.New("denied")
	}
	passwordServer := startGoServer(t, &ssh.ServerConfig{
		PasswordCallback: func(c ssh.ConnMetadata, pw []byte) (*ssh.Permissions, error) {
			return nil, check(c.User(), pw)
		},
	})
	kbdServer := startGoServer(t, &ssh.ServerConfig{
		KeyboardInteractiveCallback: func(c ssh.ConnMetadata, client ssh.KeyboardInteractiveChallenge) (*ssh.Permissions, error) {
			answers, err := client("", "", []string{"Password: "}, []bool{false})
			if err != nil || len(answers) != 1 {
				return nil, errors.New("no answer")
			}
			return nil, check(c.User(), []byte(answers[0]))
		},
	})
	tests := []struct {
		name     string
		srv      *goServer
		opts     Options
		wantFail domain.Failure
	}{
		{"password from file", passwordServer, Options{PasswordFile: sshdtest.WriteFile(t, "pw", password+"\n")}, domain.FailureNone},
		{"password as value", passwordServer, Options{Password: []byte(password)}, domain.FailureNone},
		{"keyboard-interactive", kbdServer, Options{Password: []byte(password)}, domain.FailureNone},
		{"key offered first, password still works", passwordServer, Options{PrivateKey: randomKeyPEM(t), Password: []byte(password)}, domain.FailureNone},
		{"wrong password", passwordServer, Options{Password: []byte("wrong")}, domain.FailureAuth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			o.TrustOnFirstUse = true
			o.DefaultPort = tt.srv.port
			o.Logger = testLogger(t)
			e, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			ex, out := run(t, e, domain.Command{Host: "127.0.0.1", Script: "echo hello $NAME", Env: map[string]string{"NAME": "pw"}}, time.Minute)
			if ex.Failure != tt.wantFail {
				t.Fatalf("failure %s (%v), want %s", ex.Failure, ex.Err, tt.wantFail)
			}
			if tt.wantFail == domain.FailureNone {
				if out.Stdout() != "hello pw\n" {
					t.Fatalf("stdout %q", out.Stdout())
				}
				if ex.HostKey != authorized(tt.srv.hostKey.PublicKey()) {
					t.Fatalf("host key %q not reported for pinning", ex.HostKey)
				}
			} else if ex.ConnectAttempts != 1 || strings.Contains(ex.Err.Error(), "wrong") {
				t.Fatalf("auth failure after %d attempts, error %q", ex.ConnectAttempts, ex.Err)
			}
		})
	}
}

// randomKeyPEM returns a new private key nobody authorized, in OpenSSH form.
func randomKeyPEM(t *testing.T) []byte {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block)
}
