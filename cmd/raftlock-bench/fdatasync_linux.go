package main

import (
	"os"
	"syscall"
	"time"
)

// fdatasync flushes f's data (and the metadata needed to read it) to the disk, as raft's log
// store and redis-server's appendfsync do.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }

// processCPU is the user and system time this process has used so far.
func processCPU() (user, sys time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, false
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano()), true
}
