//go:build !linux

package main

import (
	"os"
	"time"
)

// fdatasync is f.Sync where the system has no fdatasync.
func fdatasync(f *os.File) error { return f.Sync() }

// processCPU reports no figures where the Linux getrusage call is not used.
func processCPU() (user, sys time.Duration, ok bool) { return 0, 0, false }
