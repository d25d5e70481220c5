package simvm

import "syscall"

// sysProcAttr puts each command in its own process group (so the whole tree
// can be signalled) and has the kernel kill it if this process dies, so a
// crashed test leaves no stray processes behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
