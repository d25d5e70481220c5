//go:build unix && !linux

package simvm

import "syscall"

// sysProcAttr puts each command in its own process group so the whole tree
// can be signalled.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
