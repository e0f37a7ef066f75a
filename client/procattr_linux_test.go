package client

import "syscall"

// serverProcAttr makes the kernel kill the server TestMain starts when the test binary dies
// (a panic, a timeout), so that no node outlives its tests.
func serverProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
