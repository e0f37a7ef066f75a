//go:build !raftlock_testclock

package main

import (
	"log/slog"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// failingDisk exists only in test builds; run refuses --test-disk-faults before it is reached.
func failingDisk(*slog.Logger) (vfs.FS, func()) { return vfs.Default, func() {} }
