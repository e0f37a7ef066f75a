package powerloss

import (
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A store whose sync is dropped: the bug each kind of harness run must catch. The filesystem
// below passes everything through except the syncs of the files a rule names, which it skips
// while reporting success, as a disk whose fsync lies does. The stores themselves are unchanged.

// dropRule names the files whose syncs a broken run drops.
type dropRule string

const (
	dropNone dropRule = ""
	// dropWAL skips the fdatasync of every append and cut of the raft log's segment files
	// (store/wal.go's writeSynced and zeroRange); creating and zero-filling a segment still syncs.
	dropWAL dropRule = "wal"
	// dropStable skips the syncs of the pebble WAL of the stable store (split layout): every
	// pebble.Sync of Set returns before its batch is durable.
	dropStable dropRule = "stable"
	// dropSnapshots skips the syncs of the pebble WAL of the snapshot store (split layout): a
	// sink's Close returns before its metadata and chunks are durable.
	dropSnapshots dropRule = "snapshots"
)

// drops reports whether the rule drops a sync of path; data says whether the sync is a
// fdatasync (SyncData) rather than a full one (Sync, SyncTo).
func (r dropRule) drops(path string, data bool) bool {
	switch r {
	case dropWAL:
		return data && strings.Contains(path, "/raftlog/")
	case dropStable:
		return strings.HasPrefix(path, dirStable+"/") && strings.HasSuffix(path, ".log")
	case dropSnapshots:
		return strings.HasPrefix(path, dirSnapshots+"/") && strings.HasSuffix(path, ".log")
	}
	return false
}

// syncDropFS is fs with the syncs rule names skipped; dropped counts them.
type syncDropFS struct {
	vfs.FS
	rule    dropRule
	dropped *atomic.Int64
}

func (f syncDropFS) wrap(name string, file vfs.File, err error) (vfs.File, error) {
	if err != nil || f.rule == dropNone {
		return file, err
	}
	return lyingFile{File: file, name: name, fs: f}, nil
}

func (f syncDropFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.Create(name, c)
	return f.wrap(name, file, err)
}

func (f syncDropFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	file, err := f.FS.Open(name, opts...)
	return f.wrap(name, file, err)
}

func (f syncDropFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	file, err := f.FS.OpenReadWrite(name, c, opts...)
	return f.wrap(name, file, err)
}

func (f syncDropFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.ReuseForWrite(oldname, newname, c)
	return f.wrap(newname, file, err)
}

func (f syncDropFS) Unwrap() vfs.FS { return f.FS }

// lyingFile skips the syncs its filesystem's rule drops.
type lyingFile struct {
	vfs.File
	name string
	fs   syncDropFS
}

func (f lyingFile) lies(data bool) bool {
	if !f.fs.rule.drops(f.name, data) {
		return false
	}
	f.fs.dropped.Add(1)
	return true
}

func (f lyingFile) Sync() error {
	if f.lies(false) {
		return nil
	}
	return f.File.Sync()
}

func (f lyingFile) SyncData() error {
	if f.lies(true) {
		return nil
	}
	return f.File.SyncData()
}

func (f lyingFile) SyncTo(length int64) (bool, error) {
	if f.lies(false) {
		return true, nil
	}
	return f.File.SyncTo(length)
}
