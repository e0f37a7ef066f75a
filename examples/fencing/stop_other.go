//go:build !linux

package main

import (
	"errors"
	"os"
	"syscall"
)

// errNotLinux: the demo reads worker 1's state from Linux's /proc.
var errNotLinux = errors.New("this demo needs Linux (/proc) to see worker 1 stopped")

func isStopped(int) (bool, error) { return false, errNotLinux }

// stopSelf sends SIGSTOP to the process; another thread may take it and this one run on for a
// moment (see stop_linux.go).
func stopSelf() error { return syscall.Kill(os.Getpid(), syscall.SIGSTOP) }
