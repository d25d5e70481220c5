package ssh

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Remote commands. sshd hands the exec request to the login shell, so they
// use only syntax every Bourne-like shell (and csh) accepts; the script
// itself travels on stdin, never on the command line (no argument length
// limit, no scp/sftp needed).
const (
	remoteSh   = "exec /bin/sh -s"
	remoteBash = "exec /bin/sh -c 'command -v bash >/dev/null 2>&1 && exec bash -s; exec /bin/sh -s'"
)

// shellFlags are the options a shebang may carry ("#!/bin/bash -ex"); they
// are applied with set, after the environment is exported so -x does not
// print the variables' values.
var shellFlags = regexp.MustCompile(`^-[aefuvxCET]+$`)

var errUnsupportedInterpreter = errors.New("unsupported interpreter")

// script is a hook script prepared for "sh -s": the remote command to exec
// and what to write to its stdin.
type script struct {
	command string
	payload string
}

// prepareScript builds the remote command and stdin payload for src with env
// exported (names must already be valid shell identifiers).
//
// The payload is one brace group, so the shell reads all of it before it
// runs anything. Inside it:
//   - the script runs in a subshell with stdin from /dev/null, so a command
//     that reads stdin (apt-get, read) cannot swallow the rest of the script;
//   - a watchdog keeps reading the session's stdin, which the runner never
//     closes, and kills the whole process group when it hits EOF: if the
//     runner dies or the connection drops, the script dies with it rather
//     than running on while another replica runs the hook again;
//   - the main shell waits for the script, stops the watchdog and exits
//     with the script's status. Processes the script leaves in the
//     background survive a normal exit, as they would over plain ssh.
func prepareScript(src string, env map[string]string) (script, error) {
	bash, flags, err := interpreter(src)
	if err != nil {
		return script{}, err
	}
	var b strings.Builder
	b.WriteString("{\nexec 3<&0\n(\n")
	for _, name := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(&b, "export %s=%s\n", name, shellQuote(env[name]))
	}
	if flags != "" {
		fmt.Fprintf(&b, "set %s\n", flags)
	}
	b.WriteString(src)
	if !strings.HasSuffix(src, "\n") {
		b.WriteByte('\n')
	}
	b.WriteString(`) </dev/null 3<&- &
__nodesmith_script=$!
(cat <&3; kill -KILL 0) </dev/null >/dev/null 2>&1 &
__nodesmith_watchdog=$!
exec 3<&-
wait "$__nodesmith_script"
__nodesmith_status=$?
kill -KILL "$__nodesmith_watchdog" 2>/dev/null
exit "$__nodesmith_status"
}
`)
	cmd := remoteSh
	if bash {
		cmd = remoteBash
	}
	return script{command: cmd, payload: b.String()}, nil
}

// interpreter reads the shebang: bash when it names bash, sh for sh-family
// shells or no shebang; anything else (python, perl) is refused rather than
// fed to sh. flags are shebang options to apply with set.
func interpreter(src string) (bash bool, flags string, err error) {
	if !strings.HasPrefix(src, "#!") {
		return false, "", nil
	}
	line, _, _ := strings.Cut(src[2:], "\n")
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return false, "", nil
	}
	prog, args := path.Base(fields[0]), fields[1:]
	if prog == "env" {
		for len(args) > 0 && strings.HasPrefix(args[0], "-") {
			args = args[1:] // env's own options, e.g. -S
		}
		if len(args) == 0 {
			return false, "", fmt.Errorf("%w: %q", errUnsupportedInterpreter, line)
		}
		prog, args = path.Base(args[0]), args[1:]
	}
	switch prog {
	case "bash":
		bash = true
	case "sh", "dash", "ash":
	default:
		return false, "", fmt.Errorf("%w %q: hook scripts run with sh or bash", errUnsupportedInterpreter, prog)
	}
	for _, a := range args {
		if !shellFlags.MatchString(a) {
			return false, "", fmt.Errorf("%w: shebang option %q is not supported (use set in the script)", errUnsupportedInterpreter, a)
		}
	}
	return bash, strings.Join(args, " "), nil
}

// shellQuote single-quotes s for any POSIX shell: inside single quotes
// nothing is special except the quote itself, written as '\”.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
