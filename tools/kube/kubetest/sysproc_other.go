//go:build !linux

package kubetest

import "syscall"

// sysProcAttr: without Pdeathsig (Linux only), children are stopped by
// t.Cleanup only.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
