//go:build !linux

package main

import "os"

// fdatasync is f.Sync where the system has no fdatasync.
func fdatasync(f *os.File) error { return f.Sync() }
