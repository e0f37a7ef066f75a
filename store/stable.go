package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

var _ raft.StableStore = (*Store)(nil)

// Set stores key = val, fsynced: raft keeps its current term and vote here, and voting
// twice in a term after a crash would break election safety.
func (s *Store) Set(key, val []byte) error {
	err := s.use(func(db *pebble.DB) error {
		return db.Set(s.keys.key(prefixStable, key), val, pebble.Sync)
	})
	if err != nil {
		return fmt.Errorf("set %q: %w", key, err)
	}
	return nil
}

// Get returns a copy of the value of key, or ErrKeyNotFound (text "not found", which raft
// matches by text) if it was never set.
func (s *Store) Get(key []byte) ([]byte, error) {
	var out []byte
	err := s.use(func(db *pebble.DB) error {
		val, closer, err := db.Get(s.keys.key(prefixStable, key))
		if errors.Is(err, pebble.ErrNotFound) {
			return ErrKeyNotFound // unwrapped: raft compares err.Error() == "not found"
		}
		if err != nil {
			return fmt.Errorf("get %q: %w", key, err)
		}
		// Copy before Close: val is pebble's memory. Never nil, even for an empty value,
		// since raft tests the vote candidate with != nil.
		out = append(make([]byte, 0, len(val)), val...)
		return closer.Close()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SetUint64 stores val as 8 big-endian bytes under key (the same key space as Set, like
// raft-boltdb).
func (s *Store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 returns the value stored by SetUint64.
//
// For a missing key it returns 0 and ErrKeyNotFound, mirroring raft-boltdb (the production
// store raft was built against) rather than raft's InmemStore, which returns 0, nil. raft
// accepts both: every GetUint64 caller (NewRaft, HasExistingState, requestVote) ignores an
// error whose text is "not found" and uses the 0, which is what the interface documents.
// The error lets our own callers tell "never set" from "set to 0".
func (s *Store) GetUint64(key []byte) (uint64, error) {
	val, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(val) != 8 {
		return 0, fmt.Errorf("get uint64 %q: value is %d bytes, want 8", key, len(val))
	}
	return binary.BigEndian.Uint64(val), nil
}
