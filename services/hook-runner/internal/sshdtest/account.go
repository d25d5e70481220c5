package sshdtest

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PasswordAccountName is the dedicated local account that password
// authentication tests log in as. It exists only while such a test runs
// (see passwordAccount); nothing else on the machine is touched.
const PasswordAccountName = "nodesmith-hooktest"

// accountMarker is the account's GECOS field. It is how the helper knows an
// existing account of that name is its own (left behind by a run that was
// killed before its cleanup) rather than somebody else's.
const accountMarker = "nodesmith hook-runner sshd test account (temporary)"

// lockPath serializes the tests of every process that use the account:
// each sets its own random password, so two at once would lock each other
// out (go test runs packages in parallel).
var lockPath = filepath.Join(os.TempDir(), "nodesmith-hooktest.lock")

// passwordAccount makes PasswordAccountName usable for password logins for
// the rest of the test and returns its name and a fresh random password.
//
// It needs root (useradd, chpasswd); otherwise the test is skipped. An
// account of that name that this helper did not create is never modified:
// the test fails instead. The account is removed when the test ends, with
// its home, a temporary directory.
func passwordAccount(t testing.TB) (name, password string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("password authentication against sshd needs root: the test creates the throwaway local account %s "+
			"(useradd) and sets a random password on it (chpasswd); run the tests as root to include it", PasswordAccountName)
	}
	for _, tool := range []string{"useradd", "userdel", "usermod", "chpasswd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: install the Debian package passwd (apt-get install passwd)", tool)
		}
	}
	lock := acquireLock(t)
	t.Cleanup(func() { _ = lock.Close() }) // closing releases the flock

	home, err := os.MkdirTemp("", "nodesmith-hooktest-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(home) })

	u, err := user.Lookup(PasswordAccountName)
	var unknown user.UnknownUserError
	switch {
	case errors.As(err, &unknown):
		// Without -m: the home is ours, made above. The shell must run the
		// hook payload (sh -s).
		runTool(t, "", "useradd", "--comment", accountMarker, "--home-dir", home, "--no-create-home",
			"--shell", "/bin/sh", PasswordAccountName)
	case err != nil:
		t.Fatalf("looking up %s: %v", PasswordAccountName, err)
	case u.Name != accountMarker:
		t.Fatalf("a local account %s exists that this test helper did not create (GECOS %q); "+
			"refusing to change its password: remove it or run the tests elsewhere", PasswordAccountName, u.Name)
	default:
		// Left behind by a run killed before its cleanup: ours to reuse.
		runTool(t, "", "usermod", "--home", home, "--shell", "/bin/sh", PasswordAccountName)
	}
	t.Cleanup(func() { removeAccount(t) })

	u, err = user.Lookup(PasswordAccountName)
	if err != nil {
		t.Fatalf("looking up %s after creating it: %v", PasswordAccountName, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(home, uid, gid); err != nil {
		t.Fatal(err)
	}

	password = randomPassword()
	runTool(t, PasswordAccountName+":"+password+"\n", "chpasswd")
	return PasswordAccountName, password
}

// acquireLock takes the cross-process lock on the account, waiting for
// another test process that holds it.
func acquireLock(t testing.TB) *os.File {
	t.Helper()
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("opening %s: %v", lockPath, err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			t.Fatalf("locking %s: %v", lockPath, err)
		}
		if time.Now().After(deadline) {
			_ = f.Close()
			t.Fatalf("another test process held %s for 5 minutes", lockPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeAccount deletes the account. sshd's per-connection children may
// still be exiting after the client closed, and userdel refuses to delete
// an account with running processes, so it is retried for a while; an
// account left behind is adopted and removed by the next run.
func removeAccount(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command("userdel", PasswordAccountName).CombinedOutput()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("could not remove the test account %s (a later run will reuse and remove it): %v: %s",
				PasswordAccountName, err, strings.TrimSpace(string(out)))
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// randomPassword has about 130 random bits, plus a space and quotes so
// that such characters are exercised too.
func randomPassword() string {
	return rand.Text() + ` 'q"`
}

func runTool(t testing.TB, stdin, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		// chpasswd's input holds the password: only the tool's own output
		// is shown, never stdin.
		t.Fatalf("%s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
}

// passwordConfig is the sshd_config part of a server accepting passwords:
// plain "password" authentication checked against the shadow file (no PAM,
// so no keyboard-interactive), for the test account and, with its key, for
// the current user; nobody else may log in.
func passwordConfig(account, current string) string {
	return fmt.Sprintf(`PasswordAuthentication yes
KbdInteractiveAuthentication no
PermitEmptyPasswords no
AllowUsers %s %s
`, account, current)
}
