package ssh

import (
	"errors"
	"io"
	"net"
	"os/exec"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/crypto/ssh"
)

// goServer is a minimal in-process SSH server (golang.org/x/crypto/ssh)
// that runs exec requests with /bin/sh -c. It exists for
// keyboard-interactive authentication, which sshd offers only through PAM
// (the test sshd runs without), and for password tests that need no root:
// against sshd, they need a throwaway local account (sshdtest).
type goServer struct {
	port    int
	hostKey ssh.Signer
}

func startGoServer(t *testing.T, cfg *ssh.ServerConfig) *goServer {
	t.Helper()
	s := &goServer{hostKey: newSigner(t)}
	cfg.AddHostKey(s.hostKey)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); serveConn(c, cfg) }()
		}
	}()
	return s
}

func serveConn(c net.Conn, cfg *ssh.ServerConfig) {
	defer c.Close()
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	defer sc.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			return
		}
		go serveSession(ch, creqs)
	}
}

func serveSession(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" {
			_ = req.Reply(false, nil)
			continue
		}
		var p struct{ Command string }
		if err := ssh.Unmarshal(req.Payload, &p); err != nil {
			_ = req.Reply(false, nil)
			return
		}
		cmd := exec.Command("/bin/sh", "-c", p.Command)
		cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		stdin, _ := cmd.StdinPipe()
		if err := cmd.Start(); err != nil {
			_ = req.Reply(false, nil)
			return
		}
		_ = req.Reply(true, nil)
		go func() { _, _ = io.Copy(stdin, ch); _ = stdin.Close() }()
		go func() {
			for r := range reqs { // signals after exec: kill the group
				if r.Type == "signal" {
					_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				}
				if r.WantReply {
					_ = r.Reply(false, nil)
				}
			}
		}()
		status := 0
		if err := cmd.Wait(); err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				status = 255
			} else {
				status = ee.ExitCode()
			}
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // leftovers, like the watchdog
		_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(status)}))
		return
	}
}
