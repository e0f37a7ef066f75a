package main

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// groupLog is an append-only file written in batches: one syncer goroutine
// writes and fdatasyncs whatever queued while it was busy, then wakes every
// request waiting on that batch. Batches are synced in the order they queue.
type groupLog struct {
	f    *os.File
	mu   sync.Mutex
	next *batch // what queues now goes in the next write
	busy bool   // the syncer is writing or syncing a batch
	kick chan struct{}
}

// batch is the records of one write + fdatasync and its outcome.
type batch struct {
	buf    []byte
	synced chan struct{}
	err    error
}

func newGroupLog(f *os.File) *groupLog {
	l := &groupLog{f: f, next: newBatch(), kick: make(chan struct{}, 1)}
	go l.syncer()
	return l
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
			_, b.err = l.f.Write(b.buf)
			if b.err == nil {
				b.err = unix.Fdatasync(int(l.f.Fd()))
			}
			close(b.synced)
		}
	}
}
