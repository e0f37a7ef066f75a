package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/raftlock/raftlock/metrics"
)

// Groups is the stores of one node's raft groups, all over one pebble database: group g
// keeps its keys under its own prefix (see the package comment) and its log in its own
// directory. Each group's Store is a full raft.LogStore, raft.StableStore and, through
// Snapshots, raft.SnapshotStore, independent of the others.
type Groups struct {
	db     *pebble.DB
	stores []*Store

	life struct {
		sync.Mutex
		closed bool
	}
}

// OpenGroups opens (creating if needed) the pebble database in cfg.Dir once and the stores of
// groups raft groups over it, each recovered and cleaned up as Open does, within the group's
// own keys and log directory. Group 0 is the store Open reads and writes, so a node's store
// from before groups becomes its group 0. groups must be in [1, MaxGroups], and no fewer than
// the database was opened with before: a group's keys left behind are refused, not ignored.
func OpenGroups(cfg Config, groups int) (*Groups, error) {
	if groups < 1 || groups > MaxGroups {
		return nil, fmt.Errorf("store: groups must be in [1, %d], got %d", MaxGroups, groups)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	opts := &pebble.Options{
		FS:                 cfg.FS,
		CacheSize:          cfg.CacheSize,
		MemTableSize:       cfg.MemTableSize,
		MaxOpenFiles:       maxOpenFiles,
		FormatMajorVersion: pebble.FormatNewest, // a new store needs no old on-disk formats
		Logger:             pebbleLogger{log: cfg.Logger.With("component", "pebble")},
	}
	db, err := pebble.Open(cfg.Dir, opts)
	if err != nil {
		return nil, fmt.Errorf("open pebble %s: %w", cfg.Dir, err)
	}
	if err := checkNoGroupFrom(db, groups); err != nil {
		_ = db.Close() // the first error is the one worth reporting
		return nil, fmt.Errorf("open store %s: %w", cfg.Dir, err)
	}
	gs := &Groups{db: db, stores: make([]*Store, 0, groups)}
	for g := range groups {
		s, err := openGroup(db, cfg, g)
		if err != nil {
			if g > 0 {
				err = fmt.Errorf("group %d: %w", g, err)
			}
			for _, s := range gs.stores {
				_ = s.Close()
			}
			_ = db.Close()
			return nil, fmt.Errorf("open store %s: %w", cfg.Dir, err)
		}
		gs.stores = append(gs.stores, s)
	}
	return gs, nil
}

// openGroup opens group g's store over db: its log, then the pebble log's move and the
// partial snapshots' reaping, both within the group's keys.
func openGroup(db *pebble.DB, cfg Config, g int) (*Store, error) {
	log := cfg.Logger
	if g > 0 {
		log = log.With("group", g)
	}
	s := &Store{db: db, keys: groupKeyspace(g), log: log, cfg: cfg,
		syncs: metrics.NewHistogram(metrics.Latency)}
	s.readers.m = make(map[*snapshotReader]struct{})

	s.wal = &wal{
		fs: cfg.FS, dir: cfg.FS.PathJoin(cfg.Dir, groupLogDir(g)), segSize: cfg.SegmentSize,
		log: s.log, syncs: s.syncs, readFloor: s.readLogFloor, writeFloor: s.writeLogFloor,
	}
	if err := s.wal.open(); err != nil {
		return nil, err
	}
	err := s.movePebbleLog()
	if err == nil {
		err = reapPartialSnapshots(db, s.keys, s.log)
	}
	if err != nil {
		_ = s.wal.Close() // the first error is the one worth reporting
		return nil, err
	}
	s.log.Info("store opened", "dir", cfg.Dir,
		"first_index", s.wal.first.Load(), "last_index", s.wal.last.Load())
	return s, nil
}

// groupLogDir is group g's log directory in Config.Dir: raftlog for group 0, as before
// groups existed, raftlog-g<g> for the others.
func groupLogDir(g int) string {
	if g == 0 {
		return logDirName
	}
	return fmt.Sprintf("%s-g%d", logDirName, g)
}

// checkNoGroupFrom refuses a database holding keys of group groups or a higher one. A node's
// groups are fixed when its stores are created; opening fewer would drop the durable state
// (votes, logs, snapshots) of the rest without a word.
func checkNoGroupFrom(db *pebble.DB, groups int) error {
	it, err := db.NewIter(&pebble.IterOptions{
		LowerBound: groupKeyspace(groups), UpperBound: []byte{prefixGroup + 1},
	})
	if err != nil {
		return err
	}
	if it.First() {
		key := it.Key()
		err = fmt.Errorf("it holds key %x, outside the %d groups opened", key, groups)
		if len(key) >= 3 {
			err = fmt.Errorf("it holds group %d, more than the %d groups opened",
				binary.BigEndian.Uint16(key[1:]), groups)
		}
	}
	return errors.Join(err, it.Error(), it.Close())
}

// Len returns the number of groups.
func (gs *Groups) Len() int { return len(gs.stores) }

// Store returns group g's store, for 0 <= g < Len(). Closing it closes that group only.
func (gs *Groups) Store(g int) *Store { return gs.stores[g] }

// Close closes every group's store, then the database. It is idempotent.
func (gs *Groups) Close() error {
	gs.life.Lock()
	defer gs.life.Unlock()
	if gs.life.closed {
		return nil
	}
	gs.life.closed = true

	var errs []error
	for _, s := range gs.stores {
		errs = append(errs, s.Close())
	}
	if err := gs.db.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close pebble: %w", err))
	}
	return errors.Join(errs...)
}
