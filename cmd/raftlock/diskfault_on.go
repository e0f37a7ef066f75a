//go:build raftlock_testclock

package main

import (
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// failingDisk is the data directory's filesystem of a node started with --test-disk-faults: the
// real one until the process gets SIGUSR2, then one whose every write, sync, create, rename and
// removal fails with EIO, for good, as a disk that died. The chaos harness (tests/chaos, fault
// disk-fail) uses it on real processes, where a failing device cannot be had without root
// tools the test machines may lack; the node must then fail-stop (docs/disk-faults.md). Reads
// still work, as they often do on a dying disk. The returned func stops listening for the signal.
func failingDisk(logger *slog.Logger) (vfs.FS, func()) {
	var failed atomic.Bool
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failed.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return &os.PathError{Op: "write", Path: op.Path, Err: syscall.EIO}
		}
		return nil
	}))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR2)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-sig:
				if !failed.Swap(true) {
					logger.Warn("--test-disk-faults: SIGUSR2: every write and sync of the data directory fails from now on")
				}
			case <-done:
				return
			}
		}
	}()
	return fs, func() {
		signal.Stop(sig)
		close(done)
	}
}
