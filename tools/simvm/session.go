package simvm

import (
	"errors"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

// Signals a client may send with a "signal" request (RFC 4254 6.9 names).
var signals = map[string]syscall.Signal{
	"ABRT": syscall.SIGABRT,
	"ALRM": syscall.SIGALRM,
	"FPE":  syscall.SIGFPE,
	"HUP":  syscall.SIGHUP,
	"ILL":  syscall.SIGILL,
	"INT":  syscall.SIGINT,
	"KILL": syscall.SIGKILL,
	"PIPE": syscall.SIGPIPE,
	"QUIT": syscall.SIGQUIT,
	"SEGV": syscall.SIGSEGV,
	"TERM": syscall.SIGTERM,
	"USR1": syscall.SIGUSR1,
	"USR2": syscall.SIGUSR2,
}

func signalName(s syscall.Signal) string {
	for name, sig := range signals {
		if sig == s {
			return name
		}
	}
	return "KILL" // RFC 4254 has no generic form; KILL is the closest truthful answer
}

// protectedEnv lists variables a client may not override: they make the
// sandbox work (sshd's AcceptEnv plays the same role on a real host).
var protectedEnv = map[string]bool{
	"PATH": true, "HOME": true, "SIMVM_SANDBOX": true, "SIMVM_VM_ID": true, "TMPDIR": true,
}

func reply(req *ssh.Request, ok bool) {
	if req.WantReply {
		_ = req.Reply(ok, nil)
	}
}

// handleSession serves one session channel: it collects "env" requests until
// an "exec" arrives, then runs the command. Interactive shells, PTYs and
// subsystems are refused: a hook runner only needs exec.
func (v *VM) handleSession(log *slog.Logger, ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	env := map[string]string{}
	for req := range reqs {
		switch req.Type {
		case "env":
			var p struct{ Name, Value string }
			if err := ssh.Unmarshal(req.Payload, &p); err != nil || p.Name == "" || protectedEnv[p.Name] ||
				strings.ContainsAny(p.Name, "=\x00") || strings.ContainsRune(p.Value, 0) {
				reply(req, false)
				continue
			}
			env[p.Name] = p.Value
			reply(req, true)
		case "exec":
			var p struct{ Command string }
			if err := ssh.Unmarshal(req.Payload, &p); err != nil {
				reply(req, false)
				continue
			}
			v.runExec(log, ch, req, reqs, p.Command, env)
			return
		default: // shell, pty-req, subsystem, x11-req, signal before exec, ...
			reply(req, false)
		}
	}
}

// environ builds a command's environment: a login-like base, the VM's spec
// env, then the client's env requests.
func (v *VM) environ(session map[string]string) []string {
	env := map[string]string{
		"PATH":          v.sandbox + "/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME":          v.sandbox,
		"TMPDIR":        v.sandbox + "/tmp",
		"USER":          v.f.cfg.User,
		"LOGNAME":       v.f.cfg.User,
		"SHELL":         "/bin/sh",
		"LANG":          "C.UTF-8",
		"SIMVM_SANDBOX": v.sandbox,
		"SIMVM_VM_ID":   v.spec.ID,
	}
	for k, val := range v.spec.Env {
		if !protectedEnv[k] {
			env[k] = val
		}
	}
	maps.Copy(env, session)
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// runExec runs command like sshd does for an exec request: "/bin/sh -c" in
// the sandbox, stdio wired to the channel, then exit-status (or exit-signal)
// and close. The command runs in its own process group, which is killed when
// the client closes the channel or disconnects, and in any case when the
// session ends, so no process outlives its session.
func (v *VM) runExec(log *slog.Logger, ch ssh.Channel, req *ssh.Request, reqs <-chan *ssh.Request, command string, env map[string]string) {
	log = log.With("command", truncate(command, 200))
	started := time.Now()

	// Our own pipes (rather than exec's io.Writer plumbing) let us decide
	// how long to wait for output after the shell exits.
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		log.Error("stdout pipe", "err", err)
		reply(req, false)
		return
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		closeAll(stdoutR, stdoutW)
		log.Error("stderr pipe", "err", err)
		reply(req, false)
		return
	}
	cmd := exec.Command("/bin/sh", "-c", command)
	cmd.Dir = v.sandbox
	cmd.Env = v.environ(env)
	cmd.Stdout = stdoutW
	cmd.Stderr = stderrW
	cmd.SysProcAttr = sysProcAttr()
	stdin, err := cmd.StdinPipe()
	if err == nil {
		err = cmd.Start()
	}
	closeAll(stdoutW, stderrW) // the child has its copies
	if err != nil {
		closeAll(stdoutR, stderrR)
		log.Error("cannot start command", "err", err)
		reply(req, false)
		return
	}
	reply(req, true)
	pgid := cmd.Process.Pid
	log.Debug("command started", "pid", pgid)

	var bg sync.WaitGroup // goroutines that must end before we return
	bg.Add(1)
	go func() {
		defer bg.Done()
		// Client EOF (or channel close) becomes EOF on the command's stdin.
		_, _ = io.Copy(stdin, ch)
		_ = stdin.Close()
	}()

	outDone := make(chan struct{})
	var out sync.WaitGroup
	out.Add(2)
	go func() { defer out.Done(); _, _ = io.Copy(ch, stdoutR) }()
	go func() { defer out.Done(); _, _ = io.Copy(ch.Stderr(), stderrR) }()
	go func() { out.Wait(); close(outDone) }()

	procDone := make(chan struct{})
	bg.Add(1)
	go func() {
		defer bg.Done()
		for r := range reqs {
			if r.Type == "signal" {
				var p struct{ Signal string }
				if err := ssh.Unmarshal(r.Payload, &p); err == nil {
					if sig, ok := signals[strings.TrimPrefix(strings.ToUpper(p.Signal), "SIG")]; ok {
						log.Debug("delivering signal to process group", "signal", p.Signal)
						killGroup(pgid, sig)
						reply(r, true)
						continue
					}
				}
			}
			reply(r, false)
		}
		// The client closed the channel or the connection died: like sshd
		// hanging up the session, make sure nothing keeps running.
		select {
		case <-procDone:
		default:
			log.Info("client went away, killing command")
		}
		killGroup(pgid, syscall.SIGKILL)
	}()

	waitErr := cmd.Wait()
	close(procDone)

	// Output written just before exit is still in the pipes; background
	// children may also hold them open. Give them OrphanGrace, then kill.
	grace := v.f.cfg.OrphanGrace
	select {
	case <-outDone:
	case <-time.After(grace):
		killGroup(pgid, syscall.SIGKILL)
		select {
		case <-outDone:
		case <-time.After(grace):
			// Something escaped the process group (setsid); stop reading.
			closeAll(stdoutR, stderrR)
			<-outDone
		}
	}
	killGroup(pgid, syscall.SIGKILL) // leftovers that closed their output
	closeAll(stdoutR, stderrR)

	status, sigName := exitInfo(cmd.ProcessState, waitErr)
	if err := v.runDrains(); err != nil {
		_, _ = io.WriteString(ch.Stderr(), "error: "+err.Error()+"\n")
		if status == 0 && sigName == "" {
			status = 1
		}
	}
	rec := ExecRecord{Command: command, Started: started, Ended: time.Now()}
	rec.ExitStatus, rec.Signal = status, sigName
	v.record(rec)

	// Report a join before the exit status: once the client sees success,
	// the cluster already knows the node.
	v.checkJoin()

	_ = ch.CloseWrite()
	if sigName != "" {
		_, _ = ch.SendRequest("exit-signal", false, ssh.Marshal(struct {
			Signal     string
			CoreDumped bool
			Error      string
			Lang       string
		}{Signal: sigName, Error: "killed by signal " + sigName}))
	} else {
		_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(status)}))
	}
	_ = ch.Close()
	bg.Wait()
	log.Debug("command finished", "exitStatus", status, "signal", sigName, "duration", rec.Ended.Sub(started))
}

// exitInfo extracts the exit status, or the signal name if killed by one.
func exitInfo(ps *os.ProcessState, waitErr error) (int, string) {
	if ps == nil {
		return 255, ""
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -1, signalName(ws.Signal())
	}
	var ee *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &ee) {
		return 255, ""
	}
	return ps.ExitCode(), ""
}

func killGroup(pgid int, sig syscall.Signal) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, sig)
	}
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
