package testutil

import "syscall"

// sysProcAttr makes the kernel kill the child when the process that started it dies (a test
// binary timing out, a ^C), so no node outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
