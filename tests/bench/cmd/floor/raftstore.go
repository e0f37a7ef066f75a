package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// logStore is the cheapest durable raft.LogStore: every StoreLogs appends its entries to
// zero-filled segment files in one write and one fdatasync (segments), and the entries stay in
// memory, where raft reads them back from (to replicate and to apply). Nothing reads the files:
// the floor is never restarted. A floor must not pay for a store's index, compaction or reads,
// which raftlock's own store (store/wal.go, with its log cache) does pay for.
type logStore struct {
	mu    sync.RWMutex
	first uint64     // index of logs[0]; 0 while empty
	logs  []raft.Log // copies of what raft stored: raft's own structs belong to its futures

	writeMu sync.Mutex // raft stores from one goroutine at a time, but says nothing of it
	seg     segments
	buf     []byte

	// written, when set, is told of every StoreLogs once its entries are durable: the
	// write-paced group commit sends its next batch from there.
	written atomic.Pointer[func([]*raft.Log)]
}

func openLogStore(dir string) (*logStore, error) {
	s := &logStore{}
	if err := s.seg.open(dir); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *logStore) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.first, nil
}

func (s *logStore) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lastLocked(), nil
}

func (s *logStore) lastLocked() uint64 {
	if len(s.logs) == 0 {
		return 0
	}
	return s.first + uint64(len(s.logs)) - 1
}

func (s *logStore) GetLog(index uint64, l *raft.Log) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.logs) == 0 || index < s.first || index > s.lastLocked() {
		return raft.ErrLogNotFound
	}
	*l = s.logs[index-s.first]
	return nil
}

func (s *logStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs writes logs to disk (one write, one fdatasync), then adds them to memory. Raft
// stores a follower's entries after it has deleted any conflicting ones, so logs either
// follow the last entry or, after a snapshot was installed, start a new run.
func (s *logStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.writeMu.Lock()
	buf := s.buf[:0]
	for _, l := range logs {
		buf = binary.AppendUvarint(buf, l.Index)
		buf = binary.AppendUvarint(buf, l.Term)
		buf = append(buf, byte(l.Type))
		buf = binary.AppendUvarint(buf, uint64(len(l.Data)))
		buf = append(buf, l.Data...)
	}
	s.buf = buf
	err := s.seg.write(buf)
	s.writeMu.Unlock()
	if err != nil {
		return err
	}
	s.mu.Lock()
	if len(s.logs) == 0 || logs[0].Index != s.lastLocked()+1 {
		s.logs, s.first = s.logs[:0], logs[0].Index
	}
	for _, l := range logs {
		s.logs = append(s.logs, *l)
	}
	s.mu.Unlock()
	if f := s.written.Load(); f != nil {
		(*f)(logs)
	}
	return nil
}

// DeleteRange drops the entries from min to max: a prefix, once a snapshot covers it, or a
// suffix that conflicts with the leader's.
func (s *logStore) DeleteRange(min, max uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.lastLocked()
	switch {
	case len(s.logs) == 0 || max < s.first || min > last:
	case min <= s.first && max >= last:
		s.logs, s.first = s.logs[:0], 0
	case min <= s.first:
		n := max - s.first + 1
		s.logs = append(s.logs[:0], s.logs[n:]...)
		s.first = max + 1
	case max >= last:
		s.logs = s.logs[:min-s.first]
	default:
		return fmt.Errorf("floor: cannot delete %d..%d from the middle of %d..%d", min, max, s.first, last)
	}
	return nil
}

// stableStore keeps raft's term and vote in one file, rewritten, synced and renamed into place
// on every change (a few per election).
type stableStore struct {
	mu   sync.Mutex
	path string
	kv   map[string][]byte
}

func newStableStore(dir string) *stableStore {
	return &stableStore{path: filepath.Join(dir, "stable"), kv: map[string][]byte{}}
}

func (s *stableStore) Set(key, val []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kv[string(key)] = bytes.Clone(val)
	var buf []byte
	for k, v := range s.kv {
		buf = binary.AppendUvarint(buf, uint64(len(k)))
		buf = append(buf, k...)
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		buf = append(buf, v...)
	}
	tmp := s.path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err = f.Write(buf); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, s.path)
}

func (s *stableStore) Get(key []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.kv[string(key)]), nil
}

func (s *stableStore) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

func (s *stableStore) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil || len(v) != 8 {
		return 0, err
	}
	return binary.BigEndian.Uint64(v), nil
}
