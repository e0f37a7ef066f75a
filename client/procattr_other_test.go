//go:build !linux

package client

import "syscall"

// serverProcAttr: elsewhere than on Linux the server outlives a test binary that dies.
func serverProcAttr() *syscall.SysProcAttr { return nil }
