package kubeapi

import "syscall"

// sysProcAttr kills the server when the test process dies without cleanup.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
