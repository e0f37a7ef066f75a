package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
)

// isStopped tells whether process pid is stopped by a signal.
func isStopped(pid int) (bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false, fmt.Errorf("worker 1's state: %w", err)
	}
	// "pid (comm) S ...": the command may hold spaces and parentheses, the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false, fmt.Errorf("worker 1's state: unexpected /proc/%d/stat %q", pid, s)
	}
	return s[i+2] == 'T', nil
}

// stopSelf stops the whole process with SIGSTOP before it returns. The signal goes to the
// calling thread (tgkill, as C's raise does), which stops on its way back from the system
// call: sent to the process (kill), another thread may take it, and this one would run on for
// a moment, far enough to make its write before the stop.
func stopSelf() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}
