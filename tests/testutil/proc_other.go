//go:build !linux

package testutil

import "syscall"

// sysProcAttr: only Linux can tie a child's life to its parent's (Pdeathsig).
func sysProcAttr() *syscall.SysProcAttr { return nil }
