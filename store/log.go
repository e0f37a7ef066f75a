package store

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

var _ raft.LogStore = (*Store)(nil)

// FirstIndex returns the lowest stored log index, 0 if the log is empty. It reads the cache.
func (s *Store) FirstIndex() (uint64, error) { return s.first.Load(), nil }

// LastIndex returns the highest stored log index, 0 if the log is empty. It reads the cache.
func (s *Store) LastIndex() (uint64, error) { return s.last.Load(), nil }

// GetLog reads the entry at index into out, or returns raft.ErrLogNotFound.
func (s *Store) GetLog(index uint64, out *raft.Log) error {
	return s.use(func(db *pebble.DB) error {
		val, closer, err := db.Get(logKey(index))
		if errors.Is(err, pebble.ErrNotFound) {
			return raft.ErrLogNotFound
		}
		if err != nil {
			return fmt.Errorf("get log %d: %w", index, err)
		}
		defer closer.Close()
		// decodeLog copies: val belongs to pebble and is invalid once closer is closed.
		if err := decodeLog(val, out); err != nil {
			return fmt.Errorf("decode log %d: %w", index, err)
		}
		out.Index = index
		return nil
	})
}

// StoreLog stores one entry durably.
func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores entries in one batch and returns only after pebble fsynced it: raft
// acknowledges entries to the leader (and counts them toward commit) once this returns.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	lo, hi := uint64(math.MaxUint64), uint64(0)
	err := s.use(func(db *pebble.DB) error {
		b := db.NewBatch()
		defer b.Close()
		var buf []byte
		for _, l := range logs {
			buf = appendLog(buf[:0], l)
			if err := b.Set(logKey(l.Index), buf, nil); err != nil { // Set copies buf
				return err
			}
			lo, hi = min(lo, l.Index), max(hi, l.Index)
		}
		start := time.Now()
		err := b.Commit(pebble.Sync)
		s.syncs.Since(start)
		return err
	})
	if err != nil {
		return fmt.Errorf("store logs [%d, %d]: %w", logs[0].Index, logs[len(logs)-1].Index, err)
	}
	if f := s.first.Load(); f == 0 || lo < f {
		s.first.Store(lo)
	}
	if hi > s.last.Load() {
		s.last.Store(hi)
	}
	return nil
}

// DeleteRange deletes the entries in [lo, hi] with one synced range tombstone. raft calls
// it for the head (compaction after a snapshot) and for the tail (a follower dropping
// entries that conflict with the leader's), so afterwards the bounds are re-read from disk
// rather than guessed.
func (s *Store) DeleteRange(lo, hi uint64) error {
	if lo > hi {
		return nil
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	var first, last uint64
	err := s.use(func(db *pebble.DB) error {
		end := logKey(hi + 1)
		if hi == math.MaxUint64 {
			_, end = familyBounds(prefixLog)
		}
		b := db.NewBatch()
		defer b.Close()
		if err := b.DeleteRange(logKey(lo), end, nil); err != nil {
			return err
		}
		if err := b.Commit(pebble.Sync); err != nil {
			return err
		}
		var err error
		first, last, err = logBounds(db)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete logs [%d, %d]: %w", lo, hi, err)
	}
	s.first.Store(first)
	s.last.Store(last)
	return nil
}

// logBounds reads the lowest and highest stored index; 0, 0 for an empty log.
func logBounds(db *pebble.DB) (first, last uint64, err error) {
	lo, hi := familyBounds(prefixLog)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, 0, fmt.Errorf("log bounds: %w", err)
	}
	if it.First() {
		first, err = logIndex(it.Key())
	}
	if err == nil && it.Last() {
		last, err = logIndex(it.Key())
	}
	return first, last, errors.Join(err, it.Error(), it.Close())
}
