package kubetest

import "syscall"

// sysProcAttr puts a child in its own process group and has the kernel
// kill it when the test binary dies (a panic or `go test -timeout` skips
// t.Cleanup), so no etcd or kube-apiserver outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
