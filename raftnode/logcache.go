package raftnode

import (
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
)

// logCache keeps the newest log entries in memory in front of the log store: the leader reads
// each entry back to replicate it, and a follower to apply it, right after writing it, and
// without a cache both would read it back from disk.
//
// It is hashicorp/raft's LogCache bounded by bytes as well as by entries. raft's keeps the
// newest N entries whatever their size: with group commit an entry is a batch of up to
// maxBatchBytes, so its 4,096 entries could hold a gigabyte (SETs of 64 KiB values, pipelined),
// all of it live heap that the memory governor (cmd/raftlock) then lets the process keep. This
// one keeps a contiguous run of the newest entries, at most maxEntries of them and, but for the
// newest, at most maxBytes of data.
//
// It keeps copies of the entries, not the *raft.Log raft hands it: on the leader that points
// into raft's future for the entry, and through the future's response (the batch's results,
// about 90 bytes a request) a pointer would keep every request's results alive for as long as
// the entry stays cached.
type logCache struct {
	raft.LogStore
	maxEntries int
	maxBytes   int

	mu     sync.RWMutex
	ring   []raft.Log // entry i at i % len(ring), for first <= i < first+count
	first  uint64
	count  int
	nbytes int // data and extensions of the cached entries
}

func newLogCache(store raft.LogStore, maxEntries, maxBytes int) (*logCache, error) {
	if maxEntries <= 0 || maxBytes <= 0 {
		return nil, fmt.Errorf("log cache: bounds must be positive (entries %d, bytes %d)", maxEntries, maxBytes)
	}
	return &logCache{LogStore: store, maxEntries: maxEntries, maxBytes: maxBytes, ring: make([]raft.Log, maxEntries)}, nil
}

func cachedSize(l *raft.Log) int { return len(l.Data) + len(l.Extensions) }

func (c *logCache) GetLog(index uint64, out *raft.Log) error {
	c.mu.RLock()
	cached := c.count > 0 && index >= c.first && index-c.first < uint64(c.count)
	if cached {
		*out = c.ring[index%uint64(len(c.ring))]
	}
	c.mu.RUnlock()
	if cached {
		return nil
	}
	return c.LogStore.GetLog(index, out)
}

func (c *logCache) StoreLog(l *raft.Log) error { return c.StoreLogs([]*raft.Log{l}) }

// StoreLogs writes logs to the store, then caches them. raft appends in index order; an entry
// that does not follow the newest cached one (after a snapshot install) starts the run again.
func (c *logCache) StoreLogs(logs []*raft.Log) error {
	if err := c.LogStore.StoreLogs(logs); err != nil {
		return fmt.Errorf("unable to store logs within log store: %w", err) // the store's DiskError stays visible
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range logs {
		if c.count > 0 && l.Index != c.first+uint64(c.count) {
			c.resetLocked()
		}
		if c.count == 0 {
			c.first = l.Index
		}
		if c.count == c.maxEntries { // make room first: the newest takes the oldest's slot
			c.evictOldestLocked()
		}
		c.ring[l.Index%uint64(len(c.ring))] = *l
		c.count++
		c.nbytes += cachedSize(l)
		for c.count > 1 && c.nbytes > c.maxBytes {
			c.evictOldestLocked()
		}
	}
	return nil
}

func (c *logCache) evictOldestLocked() {
	slot := c.first % uint64(len(c.ring))
	c.nbytes -= cachedSize(&c.ring[slot])
	c.ring[slot] = raft.Log{}
	c.first++
	c.count--
}

func (c *logCache) resetLocked() {
	clear(c.ring)
	c.first, c.count, c.nbytes = 0, 0, 0
}

// DeleteRange drops the cached entries in [lo, hi], then deletes them from the store: raft
// deletes the head once a snapshot covers it and a conflicting tail before it writes the
// leader's entries instead. (raft's own cache empties itself on either, and so reads back
// from disk, right after each snapshot, the entries it is replicating and applying.)
func (c *logCache) DeleteRange(lo, hi uint64) error {
	c.mu.Lock()
	if c.count > 0 && lo <= c.last() && hi >= c.first {
		switch {
		case lo <= c.first && hi >= c.last():
			c.resetLocked()
		case lo <= c.first: // the head
			for c.count > 0 && c.first <= hi {
				c.evictOldestLocked()
			}
		case hi >= c.last(): // the tail
			for c.count > 0 && c.last() >= lo {
				slot := c.last() % uint64(len(c.ring))
				c.nbytes -= cachedSize(&c.ring[slot])
				c.ring[slot] = raft.Log{}
				c.count--
			}
		default: // the middle: raft never deletes one; a run with a hole is not kept
			c.resetLocked()
		}
	}
	c.mu.Unlock()
	return c.LogStore.DeleteRange(lo, hi)
}

// last is the index of the newest cached entry (count > 0).
func (c *logCache) last() uint64 { return c.first + uint64(c.count) - 1 }
