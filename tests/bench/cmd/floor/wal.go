package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// segmentSize is the size of one log file. Each is zero-filled and fsynced before the
// first write into it (the next one in the background, while the current one fills), as
// raftlock's store does (store/wal.go): an fdatasync into a file whose size and blocks are
// durable flushes data only, the cheapest sync this disk offers, which a floor must use.
const segmentSize = 8 << 20

// segments is an append-only log in zero-filled files: write appends a buffer and fdatasyncs
// it. One goroutine at a time writes.
type segments struct {
	dir   string
	f     *os.File
	off   int64
	seq   int
	spare chan spareFile

	written atomic.Int64 // bytes written and synced, over all files
}

// groupLog is a log written in batches: one syncer goroutine writes and fdatasyncs whatever
// queued while it was busy, then wakes every request waiting on that batch. Batches are
// synced in the order they queue.
type groupLog struct {
	mu   sync.Mutex
	next *batch // what queues now goes in the next write
	busy bool   // the syncer is writing or syncing a batch
	kick chan struct{}

	segments // only the syncer writes
}

type spareFile struct {
	f   *os.File
	err error
}

// batch is the records of one write + fdatasync and its outcome.
type batch struct {
	buf    []byte
	synced chan struct{}
	err    error
}

// openGroupLog starts a log in dir: its first file is ready when this returns.
func openGroupLog(dir string) (*groupLog, error) {
	l := &groupLog{next: newBatch(), kick: make(chan struct{}, 1)}
	if err := l.open(dir); err != nil {
		return nil, err
	}
	go l.syncer()
	return l, nil
}

// open makes the first file in dir, and starts zero-filling the next.
func (l *segments) open(dir string) error {
	l.dir = dir
	l.prepare()
	sp := <-l.spare
	if sp.err != nil {
		return sp.err
	}
	l.f = sp.f
	l.prepare()
	return nil
}

// prepare zero-fills the next file in the background.
func (l *segments) prepare() {
	l.seq++
	path := filepath.Join(l.dir, fmt.Sprintf("floor-%06d.log", l.seq))
	ch := make(chan spareFile, 1)
	l.spare = ch
	go func() {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
		if err == nil {
			_, err = f.Write(make([]byte, segmentSize))
			if err == nil {
				err = f.Sync()
			}
		}
		ch <- spareFile{f, err}
	}()
}

func newBatch() *batch { return &batch{synced: make(chan struct{})} }

// enqueue queues rec and returns its batch: synced closes once rec is on
// disk (or err says why not).
func (l *groupLog) enqueue(rec []byte) *batch {
	l.mu.Lock()
	b := l.next
	b.buf = append(b.buf, rec...)
	if !l.busy {
		l.busy = true
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
	l.mu.Unlock()
	return b
}

// syncer writes and syncs batch after batch while requests keep queueing.
// It lives as long as the process (the log is never closed: the process
// ends with its last sync).
func (l *groupLog) syncer() {
	for range l.kick {
		for {
			l.mu.Lock()
			b := l.next
			if len(b.buf) == 0 {
				l.busy = false
				l.mu.Unlock()
				break
			}
			l.next = newBatch()
			l.mu.Unlock()
			b.err = l.write(b.buf)
			close(b.synced)
		}
	}
}

// write writes buf at the end of the log and fdatasyncs it, moving to the next file when
// buf does not fit (a batch larger than a file gets a file to itself, grown as it goes).
func (l *segments) write(buf []byte) error {
	if l.off > 0 && l.off+int64(len(buf)) > segmentSize {
		sp := <-l.spare
		if sp.err != nil {
			return sp.err
		}
		l.f.Close()
		l.f, l.off = sp.f, 0
		l.prepare()
	}
	if _, err := l.f.WriteAt(buf, l.off); err != nil {
		return err
	}
	if err := unix.Fdatasync(int(l.f.Fd())); err != nil {
		return err
	}
	l.off += int64(len(buf))
	l.written.Add(int64(len(buf)))
	return nil
}
