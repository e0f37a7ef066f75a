package store

import (
	"errors"
	"syscall"
	"time"
)

// A disk fault of the log is one of two kinds, and the difference is what the kernel can still
// be trusted with.
//
// A failed write or sync of data the log keeps (a segment's records, the zeroing of a cut, a
// directory entry, the floor in pebble) poisons the log for good. After a failed fsync Linux
// marks the dirty pages clean and may drop them, so a second fsync that succeeds proves nothing
// (PostgreSQL's "fsyncgate"; etcd exits on any error saving its WAL): the log can no longer tell
// what of its own tail is durable. Every later StoreLogs and DeleteRange fails at once with the
// same error, and only a restart, which reads back what the disk really holds, clears it. The
// caller must stop acknowledging (raftnode stops its raft: to the cluster the node is dead).
//
// No space to prepare the next segment file (ENOSPC or EDQUOT while creating or zero-filling
// spare.tmp or large.tmp) is not a failure of the log: that file holds nothing yet, and it is
// removed. The write that needed it is refused before any of its records is kept (records of
// the same call already written to the current segment are cut off again, a zeroing write into
// blocks the file already owns), so nothing is half-written. The log retries the spare in the
// background every spareRetry and takes writes again once one is ready: it recovers by itself.
// Health reports the condition from the first failed attempt on, while the current segment
// still has room, so that raftnode refuses client writes before raft appends them: that room is
// the reserve for what raft writes on its own and for writes already admitted.
//
// Records are written only into preallocated, zero-filled and synced segments, so on a
// filesystem that overwrites in place (ext4, xfs, tmpfs) appending a record allocates nothing
// and cannot meet ENOSPC. On a copy-on-write filesystem (btrfs, ZFS) an overwrite does allocate;
// an ENOSPC there is taken as a failed write (fail-stop), since its data may be partly in the
// page cache: docs/disk-faults.md says so.
var (
	// ErrDiskFailed is in the chain of the error that poisoned the log: a write or sync of its
	// data failed. It sticks until the process restarts.
	ErrDiskFailed = errors.New("disk failed")
	// ErrDiskFull is in the chain of a write refused for want of space for the log's next
	// segment. Nothing of the write was kept; it clears by itself once a segment could be
	// prepared.
	ErrDiskFull = errors.New("disk full")
)

// DiskError is the error of a write the log's disk refused. Its chain holds ErrDiskFailed or
// ErrDiskFull, and the filesystem's error. Layers above that may not import this package
// (raftnode, server) tell it apart by its DiskFull method.
type DiskError struct {
	// Full: no space for the next segment, nothing written, recovers by itself. Otherwise the
	// disk failed and the log is poisoned for good.
	Full bool
	Err  error
}

func (e *DiskError) Error() string {
	if e.Full {
		return "disk full: " + e.Err.Error()
	}
	return "disk failed: " + e.Err.Error()
}

// Unwrap gives the kind's sentinel and the filesystem's error.
func (e *DiskError) Unwrap() []error {
	if e.Full {
		return []error{ErrDiskFull, e.Err}
	}
	return []error{ErrDiskFailed, e.Err}
}

// DiskFull reports whether the disk is full (recoverable) rather than failed (for good).
func (e *DiskError) DiskFull() bool { return e.Full }

// spareRetry is how often the log tries again to prepare its next segment while the disk is
// full: each try writes up to a segment of zeros, so not in a tight loop.
const spareRetry = time.Second

// isNoSpace reports whether err says the filesystem, or the user's quota, is full.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// fail poisons the log with err (ErrDiskFailed), logging it once, and returns the error every
// later write gets: the first one's.
func (w *wal) fail(err error) error {
	var e error = &DiskError{Err: err}
	if w.failed.CompareAndSwap(nil, &e) {
		w.log.Error("raft log disk failed: the log takes no more writes until the process restarts",
			"dir", w.dir, "err", err)
		return e
	}
	return *w.failed.Load()
}

// health is the log's disk fault now: the sticky failure, else a full disk, else nil.
func (w *wal) health() error {
	if e := w.failed.Load(); e != nil {
		return *e
	}
	if e := w.full.Load(); e != nil {
		return *e
	}
	return nil
}

// Health reports whether the log takes writes now: nil, or an error wrapping ErrDiskFailed (for
// good) or ErrDiskFull (until space is freed). It reads two atomics and does no I/O, so it may
// be asked on every write.
func (s *Store) Health() error { return s.wal.health() }
