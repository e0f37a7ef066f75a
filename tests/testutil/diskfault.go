package testutil

import (
	"io/fs"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// FaultFS is a filesystem whose files under one directory (the raft log's) can be made to fail
// as a failing disk or a full one does, while the rest (pebble's) stays healthy.
//
// Full: appending to a file (Write, Preallocate) fails with ENOSPC; writing into bytes a file
// already has (WriteAt inside its size) succeeds, as on a filesystem that overwrites in place.
// Broken: every write, sync, create, rename and remove fails with EIO, as a disk that went bad.
type FaultFS struct {
	*errorfs.FS
	under        string
	full, broken atomic.Bool
	// Injected counts the errors the filesystem returned.
	Injected atomic.Int64
}

// NewFaultFS wraps base; faults apply to the paths that contain under (e.g. "raftlog").
func NewFaultFS(base vfs.FS, under string) *FaultFS {
	f := &FaultFS{under: under}
	f.FS = errorfs.Wrap(base, errorfs.InjectorFunc(f.inject))
	return f
}

// SetFull makes the directory's disk full (true) or gives it space again (false).
func (f *FaultFS) SetFull(full bool) { f.full.Store(full) }

// Break makes every later write and sync in the directory fail; Repair undoes it.
func (f *FaultFS) Break()  { f.broken.Store(true) }
func (f *FaultFS) Repair() { f.broken.Store(false) }

func (f *FaultFS) inject(op errorfs.Op) error {
	if !strings.Contains(op.Path, f.under) {
		return nil
	}
	var errno syscall.Errno
	switch {
	case f.broken.Load():
		switch op.Kind {
		case errorfs.OpCreate, errorfs.OpRename, errorfs.OpRemove, errorfs.OpFileWrite, errorfs.OpFileWriteAt,
			errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo, errorfs.OpFilePreallocate:
			errno = syscall.EIO
		}
	case f.full.Load():
		switch op.Kind {
		case errorfs.OpFileWrite, errorfs.OpFilePreallocate:
			errno = syscall.ENOSPC
		}
	}
	if errno == 0 {
		return nil
	}
	f.Injected.Add(1)
	return &fs.PathError{Op: "injected", Path: op.Path, Err: errno}
}
