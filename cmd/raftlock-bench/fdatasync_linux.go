package main

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data (and the metadata needed to read it) to the disk, as raft's log
// store and redis-server's appendfsync do.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
