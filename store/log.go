package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

var _ raft.LogStore = (*Store)(nil)

// FirstIndex returns the lowest stored log index, 0 if the log is empty.
func (s *Store) FirstIndex() (uint64, error) { return s.wal.first.Load(), nil }

// LastIndex returns the highest stored log index, 0 if the log is empty.
func (s *Store) LastIndex() (uint64, error) { return s.wal.last.Load(), nil }

// GetLog reads the entry at index into out, or returns raft.ErrLogNotFound.
func (s *Store) GetLog(index uint64, out *raft.Log) error { return s.wal.GetLog(index, out) }

// StoreLog stores one entry durably.
func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores entries and returns only after they are fsynced: raft acknowledges
// entries to the leader (and counts them toward commit) once this returns.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if err := s.wal.StoreLogs(logs); err != nil {
		return fmt.Errorf("store logs [%d, %d]: %w", logs[0].Index, logs[len(logs)-1].Index, err)
	}
	return nil
}

// DeleteRange deletes the entries in [lo, hi]: raft calls it for the head (compaction after
// a snapshot) and for the tail (a follower dropping entries that conflict with the leader's).
func (s *Store) DeleteRange(lo, hi uint64) error {
	if err := s.wal.DeleteRange(lo, hi); err != nil {
		return fmt.Errorf("delete logs [%d, %d]: %w", lo, hi, err)
	}
	return nil
}

// readLogFloor reads the log's lowest index since its last compaction (see wal.go).
func (s *Store) readLogFloor() (uint64, error) {
	var floor uint64
	err := s.use(func(db *pebble.DB) error {
		val, closer, err := db.Get(s.keys.key(prefixLogFloor, nil))
		if errors.Is(err, pebble.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		defer closer.Close()
		if len(val) != 8 {
			return fmt.Errorf("log floor is %d bytes, want 8", len(val))
		}
		floor = binary.BigEndian.Uint64(val)
		return nil
	})
	return floor, err
}

func (s *Store) writeLogFloor(floor uint64) error {
	return s.use(func(db *pebble.DB) error {
		key := s.keys.key(prefixLogFloor, nil)
		return db.Set(key, binary.BigEndian.AppendUint64(nil, floor), pebble.Sync)
	})
}

// logMoved is the key that sits in the family where earlier versions kept the log, and is
// not a valid log key to them: an older binary started on a data directory this one has
// opened refuses it ("malformed log key 6c6d6f766564") instead of starting from an empty log
// and losing the entries it acknowledged.
func (k keyspace) logMoved() []byte { return k.key(prefixLog, []byte("moved")) }

// movePebbleLog moves a raft log that an earlier version kept in pebble (keys prefixLog +
// index) into the segments. The pebble copy is deleted, and the logMoved key written, in one
// synced batch once the segments hold all of it, synced; until then a restart finds it
// again and starts over.
func (s *Store) movePebbleLog() error {
	lo, hi := s.keys.family(prefixLog)
	moved := s.keys.logMoved()
	return s.use(func(db *pebble.DB) error {
		seal := func() error {
			b := db.NewBatch()
			defer b.Close()
			if err := b.DeleteRange(lo, hi, nil); err != nil {
				return err
			}
			if err := b.Set(moved, nil, nil); err != nil {
				return err
			}
			return b.Commit(pebble.Sync)
		}
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return err
		}
		defer it.Close()
		if !it.First() {
			if err := it.Error(); err != nil {
				return err
			}
			return seal() // a new store
		}
		if bytes.Equal(it.Key(), moved) && !it.Next() {
			return it.Error() // moved before
		}
		if err := s.wal.reset(); err != nil {
			return err
		}
		var batch []*raft.Log
		flush := func() error {
			err := s.wal.StoreLogs(batch)
			batch = batch[:0]
			return err
		}
		entries := 0
		for ; it.Valid(); it.Next() {
			if bytes.Equal(it.Key(), moved) {
				continue
			}
			index, err := s.keys.logIndex(it.Key())
			if err != nil {
				return err
			}
			l := &raft.Log{}
			if err := decodeLog(it.Value(), l); err != nil {
				return fmt.Errorf("decode log %d: %w", index, err)
			}
			l.Index = index
			if n := len(batch); n == 256 || (n > 0 && batch[n-1].Index+1 != index) {
				if err := flush(); err != nil {
					return err
				}
			}
			batch = append(batch, l)
			entries++
		}
		if err := it.Error(); err != nil {
			return err
		}
		if err := flush(); err != nil {
			return err
		}
		if err := seal(); err != nil {
			return err
		}
		s.log.Info("raft log moved from pebble to its own segments", "entries", entries,
			"first_index", s.wal.first.Load(), "last_index", s.wal.last.Load())
		return nil
	})
}
