// Package store owns raftlock's durable state for Raft: the log (raft.LogStore), the small
// stable key/value set (raft.StableStore: current term, last vote) and the snapshots
// (raft.SnapshotStore). The log is a write-ahead log of preallocated segment files in the
// subdirectory raftlog/ (wal.go): every commit waits for its append, so it gets the cheapest
// fsync the disk offers. The rest is one pebble database in the directory. Every write that
// returns is synced on its own, so the two need no ordering between them. It knows nothing
// about locks; the bytes it keeps are Raft's.
//
// Pebble's key layout (one byte of prefix per family, so each family is a contiguous key range
// and every scan is bounded by LowerBound/UpperBound):
//
//	'f'                                     -> big-endian uint64: the log's floor (wal.go)
//	's' + raft's key                        -> stable value
//	'm' + snapshot ID                       -> version byte + JSON snapshot metadata
//	'd' + snapshot ID + '/' + big-endian n  -> chunk n of the snapshot's data
//	'l' + big-endian uint64 index           -> encoded raft.Log (see codec.go), only in a store
//	                                           an earlier version wrote; Open moves them
//
// The raft groups of one node share the database (OpenGroups). The layout above is group 0's,
// which is also what Open reads and writes, so a store written before groups existed is group 0
// byte for byte. Group g > 0 puts a group prefix before each of its keys and keeps its log in
// raftlog-g<g>/:
//
//	'G' + big-endian uint16 g + any key above  -> group g's copy of that key
//
// 'G' is no family byte, and the prefix has a fixed length, so each group's families are
// contiguous ranges of their own and a bounded scan or DeleteRange of one group never reaches
// another's keys.
package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/raftlock/raftlock/metrics"
)

// Key family prefixes. Big-endian indexes after the prefix make pebble's byte order the
// numeric order, so First/Last of a bounded iterator are the lowest and highest index.
const (
	prefixLog      byte = 'l'
	prefixLogFloor byte = 'f'
	prefixStable   byte = 's'
	prefixSnapMeta byte = 'm'
	prefixSnapData byte = 'd'

	// prefixGroup starts every key of a group g > 0 (see keyspace).
	prefixGroup byte = 'G'
)

// Defaults. Pebble's own defaults are tuned for CockroachDB-sized machines; raftlock keeps a
// short raft log and a small lock table, so a few MiB of memory is plenty and leaves room
// when several nodes share one small host (tests, containers).
const (
	// DefaultCacheSize is the pebble block cache. Hot reads (the log tail that followers are
	// catching up on) are served from the memtable, so the cache only helps cold reads.
	DefaultCacheSize int64 = 8 << 20
	// DefaultMemTableSize bounds each memtable; pebble holds at most two before it stalls
	// writes, so memtables cost at most 2x this.
	DefaultMemTableSize uint64 = 4 << 20
	// DefaultSnapshotChunkSize is the size of one snapshot value: large enough that a
	// snapshot is a few keys, small enough that a sink buffers only this much.
	DefaultSnapshotChunkSize = 1 << 20
	// DefaultSnapshotRetain is how many complete snapshots Snapshots keeps (DESIGN §6).
	DefaultSnapshotRetain = 2
	// logDirName is the log's subdirectory of Config.Dir (group g > 0 adds "-g<g>").
	logDirName = "raftlog"

	// MaxGroups is the most raft groups OpenGroups opens over one database.
	MaxGroups = 1024

	// maxOpenFiles caps pebble's table cache file descriptors (pebble's default is 1000);
	// a store this size has a handful of sstables.
	maxOpenFiles = 256
	// maxChunkSize keeps one chunk well under a memtable, so it never becomes a
	// "flushable batch" of its own.
	maxChunkSize = 64 << 20
)

var (
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("store: closed")

	// ErrKeyNotFound is returned by Get and GetUint64 for a key that was never set. Its text
	// is exactly "not found" on purpose, not a style slip: hashicorp/raft compares
	// err.Error() == "not found" (api.go HasExistingState, raft.go NewRaft and
	// requestVote) instead of using errors.Is. raft-boltdb uses the same text.
	ErrKeyNotFound = errors.New("not found")

	// ErrSnapshotNotFound is returned by SnapshotStore.Open for an unknown or deleted ID.
	ErrSnapshotNotFound = errors.New("store: snapshot not found")
)

// Config configures a Store. A zero field means the documented default.
type Config struct {
	// Dir is the pebble directory. Required.
	Dir string
	// Logger receives the store's and pebble's log lines; nil means slog.Default().
	Logger *slog.Logger
	// FS is the filesystem the log and pebble run on; nil means the OS filesystem. Tests
	// pass vfs.NewCrashableMem() to simulate power loss.
	FS vfs.FS
	// CacheSize is pebble's block cache in bytes; 0 means DefaultCacheSize.
	CacheSize int64
	// MemTableSize is the size of one pebble memtable in bytes; 0 means DefaultMemTableSize.
	MemTableSize uint64
	// SnapshotChunkSize is the size of one stored snapshot value in bytes, and so the most
	// a snapshot sink buffers; 0 means DefaultSnapshotChunkSize.
	SnapshotChunkSize int
	// SegmentSize is the size of one raft log segment file; 0 means DefaultSegmentSize.
	SegmentSize int64
}

// DefaultConfig returns a Config with every default spelled out; the caller sets Dir.
func DefaultConfig() Config {
	return Config{
		CacheSize:         DefaultCacheSize,
		MemTableSize:      DefaultMemTableSize,
		SnapshotChunkSize: DefaultSnapshotChunkSize,
		SegmentSize:       DefaultSegmentSize,
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("store: Dir is required")
	case c.CacheSize < 0:
		return fmt.Errorf("store: CacheSize must not be negative, got %d", c.CacheSize)
	case c.MemTableSize > 1<<30:
		return fmt.Errorf("store: MemTableSize must be at most 1 GiB, got %d", c.MemTableSize)
	case c.SnapshotChunkSize < 0 || c.SnapshotChunkSize > maxChunkSize:
		return fmt.Errorf("store: SnapshotChunkSize must be in [0, %d], got %d",
			maxChunkSize, c.SnapshotChunkSize)
	case c.SegmentSize < 0 || c.SegmentSize > maxWALRecordLength:
		return fmt.Errorf("store: SegmentSize must be in [0, %d], got %d",
			maxWALRecordLength, c.SegmentSize)
	}
	return nil
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.CacheSize == 0 {
		c.CacheSize = d.CacheSize
	}
	if c.MemTableSize == 0 {
		c.MemTableSize = d.MemTableSize
	}
	if c.SnapshotChunkSize == 0 {
		c.SnapshotChunkSize = d.SnapshotChunkSize
	}
	if c.SegmentSize == 0 {
		c.SegmentSize = d.SegmentSize
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
	return c
}

// Store holds one raft group's log (in wal), stable store and snapshots (in pebble). It is
// safe for concurrent use, as raft requires (replication goroutines read the log while the
// main loop appends and the snapshot goroutine compacts).
type Store struct {
	db   *pebble.DB
	keys keyspace // the group's share of db
	wal  *wal
	log  *slog.Logger
	cfg  Config

	// ownsDB is set on the store Open returns, alone over db: its Close closes db. The stores
	// of Groups share db, and Groups.Close closes it.
	ownsDB bool

	// life guards closing. Every call that touches db holds the read side, so Close (the
	// write side) never closes pebble under a running call: pebble panics on use after
	// Close, and we would rather return ErrClosed.
	life struct {
		sync.RWMutex
		closed bool
	}

	// readers are the open snapshot readers; each pins a pebble iterator, which must be
	// closed before pebble is, so Close closes the ones the caller forgot.
	readers struct {
		sync.Mutex
		m map[*snapshotReader]struct{}
	}

	// lastSnapMillis makes the store's snapshot IDs unique within this process (see
	// snapshotID); the IDs of different groups live under different keys.
	lastSnapMillis atomic.Int64

	// syncs times StoreLogs' synced writes: what each append of raft's log waits for disk.
	syncs *metrics.Histogram
}

// Open opens (creating if needed) the pebble database in cfg.Dir and the log in its raftlog/
// subdirectory, recovers the log (wal.go), moves a log an earlier version kept in pebble
// into it and deletes the leftovers of snapshots that were being written when the process
// stopped. It is group 0 of OpenGroups(cfg, 1), and owns the database: its Close closes it.
func Open(cfg Config) (*Store, error) {
	gs, err := OpenGroups(cfg, 1)
	if err != nil {
		return nil, err
	}
	s := gs.Store(0)
	s.ownsDB = true
	return s, nil
}

// Close closes open snapshot readers, the log and, for the store Open returned, the
// database. A store of Groups leaves the database, which the other groups go on using, to
// Groups.Close. Close is idempotent; every other method returns ErrClosed afterwards.
func (s *Store) Close() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.life.closed {
		return nil
	}
	s.life.closed = true

	var errs []error
	s.readers.Lock()
	for r := range s.readers.m {
		errs = append(errs, r.it.Close())
	}
	clear(s.readers.m)
	s.readers.Unlock()

	errs = append(errs, s.wal.Close())
	if s.ownsDB {
		errs = append(errs, s.db.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

// use runs fn with the database unless the store is closed (see Store.life).
func (s *Store) use(fn func(db *pebble.DB) error) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.life.closed {
		return ErrClosed
	}
	return fn(s.db)
}

// Stats is a point-in-time summary of the store, for INFO and metrics.
type Stats struct {
	// FirstIndex and LastIndex are the stored log bounds; both 0 when the log is empty.
	FirstIndex, LastIndex uint64
	// LogEntries is LastIndex-FirstIndex+1, or 0 (raft keeps the log contiguous).
	LogEntries uint64
	// LogBytes is the size of the log's records in its segment files.
	LogBytes uint64
	// Snapshots is the number of complete snapshots; LatestSnapshot is the newest one's ID.
	Snapshots      int
	LatestSnapshot string
	// DiskBytes is everything on disk: the log's segment files (preallocated, so larger than
	// LogBytes), pebble's sstables, WAL and manifest. The stores of Groups share pebble, and
	// each counts all of it.
	DiskBytes uint64
	// OpenSnapshotReaders counts snapshot readers not yet closed.
	OpenSnapshotReaders int
	// Closed reports whether Close was called; then only the log bounds are filled.
	Closed bool
	// SyncLatency is the time of each synced append of raft's log entries (StoreLogs): the
	// write and its fdatasync.
	SyncLatency metrics.Snapshot
}

// Stats returns a snapshot of the store's counters. Errors reading the on-disk estimates
// are logged and leave the field zero: stats are best effort.
func (s *Store) Stats() Stats {
	st := Stats{FirstIndex: s.wal.first.Load(), LastIndex: s.wal.last.Load(), SyncLatency: s.syncs.Snapshot()}
	if st.FirstIndex != 0 && st.LastIndex >= st.FirstIndex {
		st.LogEntries = st.LastIndex - st.FirstIndex + 1
	}
	records, files := s.wal.size()
	st.LogBytes = uint64(records)
	err := s.use(func(db *pebble.DB) error {
		st.DiskBytes = db.Metrics().DiskSpaceUsage() + uint64(files)
		metas, err := listSnapshots(db, s.keys)
		if err != nil {
			return err
		}
		st.Snapshots = len(metas)
		if len(metas) > 0 {
			st.LatestSnapshot = metas[0].Meta.ID
		}
		return nil
	})
	if errors.Is(err, ErrClosed) {
		st.Closed = true
	} else if err != nil {
		s.log.Warn("store stats incomplete", "error", err)
	}
	s.readers.Lock()
	st.OpenSnapshotReaders = len(s.readers.m)
	s.readers.Unlock()
	return st
}

// keyspace is what a group's pebble keys start with, before the family byte: nothing for
// group 0, prefixGroup and big-endian uint16 g for group g > 0. Every key a Store reads or
// writes and every bound it scans or deletes within comes from its keyspace.
type keyspace []byte

func groupKeyspace(g int) keyspace {
	if g == 0 {
		return nil
	}
	return binary.BigEndian.AppendUint16([]byte{prefixGroup}, uint16(g))
}

// key returns a new key: the keyspace, the family byte, then tail.
func (k keyspace) key(family byte, tail []byte) []byte {
	b := make([]byte, 0, len(k)+1+len(tail))
	return append(append(append(b, k...), family), tail...)
}

// family returns the [lower, upper) key range of one key family.
func (k keyspace) family(family byte) (lower, upper []byte) {
	return k.key(family, nil), k.key(family+1, nil)
}

// tail returns what follows the keyspace and family byte in key, one of k's keys.
func (k keyspace) tail(key []byte) []byte { return key[len(k)+1:] }

// logKey is prefixLog followed by the big-endian index.
func (k keyspace) logKey(index uint64) []byte {
	return k.key(prefixLog, binary.BigEndian.AppendUint64(nil, index))
}

// logIndex parses a key made by logKey.
func (k keyspace) logIndex(key []byte) (uint64, error) {
	if len(key) != len(k)+9 || key[len(k)] != prefixLog {
		return 0, fmt.Errorf("malformed log key %x", key)
	}
	return binary.BigEndian.Uint64(k.tail(key)), nil
}
