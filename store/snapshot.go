package store

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

var _ raft.SnapshotStore = (*SnapshotStore)(nil)

// SnapshotStore keeps raft snapshots in the Store's pebble database. A snapshot is written
// as chunk values while raft's FSM streams it, then its metadata is written last in a synced
// batch: a snapshot is complete exactly when its metadata exists, so a crash mid-write
// leaves chunks that List never shows and the next Open deletes.
type SnapshotStore struct {
	s      *Store
	retain int
}

// Snapshots returns a raft.SnapshotStore that keeps the newest retain complete snapshots
// and deletes older ones after each successful sink Close. retain < 1 means
// DefaultSnapshotRetain.
func (s *Store) Snapshots(retain int) *SnapshotStore {
	if retain < 1 {
		retain = DefaultSnapshotRetain
	}
	return &SnapshotStore{s: s, retain: retain}
}

// snapMetaV1 is the first byte of a stored snapshot metadata value; JSON follows.
const snapMetaV1 byte = 1

// snapRecord is the stored metadata: raft's meta plus what a reader needs to check that
// it got every chunk. (pebble checksums every block, so no CRC of our own.)
type snapRecord struct {
	Meta   raft.SnapshotMeta
	Chunks uint64
}

// Create starts a snapshot. Like raft's file store it accepts only snapshot version 1, so
// the legacy Peers field (for version 0 snapshots) is never needed and left empty.
func (ss *SnapshotStore) Create(version raft.SnapshotVersion, index, term uint64,
	configuration raft.Configuration, configurationIndex uint64,
	_ raft.Transport) (raft.SnapshotSink, error) {
	if version != 1 {
		return nil, fmt.Errorf("create snapshot: unsupported snapshot version %d", version)
	}
	if err := ss.s.use(func(*pebble.DB) error { return nil }); err != nil {
		return nil, fmt.Errorf("create snapshot: %w", err)
	}
	id := ss.s.snapshotID(term, index)
	ss.s.log.Info("creating snapshot", "id", id)
	return &snapshotSink{
		ss: ss,
		rec: snapRecord{Meta: raft.SnapshotMeta{
			Version:            version,
			ID:                 id,
			Index:              index,
			Term:               term,
			Configuration:      configuration,
			ConfigurationIndex: configurationIndex,
		}},
		buf: make([]byte, 0, ss.s.cfg.SnapshotChunkSize),
	}, nil
}

// List returns the complete snapshots, newest first, at most retain of them (like raft's
// file store).
func (ss *SnapshotStore) List() ([]*raft.SnapshotMeta, error) {
	var out []*raft.SnapshotMeta
	err := ss.s.use(func(db *pebble.DB) error {
		recs, err := listSnapshots(db, ss.s.keys)
		for _, r := range recs[:min(len(recs), ss.retain)] {
			out = append(out, &r.Meta)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	return out, nil
}

// Open returns the metadata of snapshot id and a reader streaming its data chunk by chunk.
// The reader sees the database as of Open, so deleting the snapshot meanwhile (retention)
// does not disturb it. Close the reader; Store.Close closes any left open.
func (ss *SnapshotStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	var r *snapshotReader
	err := ss.s.use(func(db *pebble.DB) error {
		// The iterator comes first: its view is fixed at creation, and a snapshot's metadata
		// exists only after all its chunks, so metadata found afterwards proves the view
		// holds every chunk.
		lo, hi := ss.s.keys.chunkBounds(id)
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return err
		}
		rec, err := readSnapshotRecord(db, ss.s.keys, id)
		if err != nil {
			return errors.Join(err, it.Close())
		}
		r = &snapshotReader{s: ss.s, it: it, rec: rec}
		ss.s.readers.Lock()
		ss.s.readers.m[r] = struct{}{}
		ss.s.readers.Unlock()
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("open snapshot %s: %w", id, err)
	}
	meta := r.rec.Meta
	return &meta, r, nil
}

// snapshotID names a snapshot "term-index-millis" like raft's file store, so IDs sort by
// term, then index, then time. The millis are made strictly increasing within the process,
// so two snapshots of the same term and index never share an ID (and chunk keys).
func (s *Store) snapshotID(term, index uint64) string {
	for {
		last := s.lastSnapMillis.Load()
		ms := max(time.Now().UnixMilli(), last+1)
		if s.lastSnapMillis.CompareAndSwap(last, ms) {
			return fmt.Sprintf("%d-%d-%d", term, index, ms)
		}
	}
}

// snapshotSink streams a snapshot into chunks of at most cap(buf) bytes.
type snapshotSink struct {
	ss   *SnapshotStore
	rec  snapRecord
	buf  []byte
	done bool // Close or Cancel was called
}

// ID returns the snapshot ID.
func (w *snapshotSink) ID() string { return w.rec.Meta.ID }

// Write buffers p and stores each full chunk. Chunks are written without fsync: the synced
// metadata batch in Close makes them durable, since pebble's WAL is one ordered stream and
// syncing a record syncs everything before it.
func (w *snapshotSink) Write(p []byte) (int, error) {
	if w.done {
		return 0, fmt.Errorf("write snapshot %s: sink is closed", w.ID())
	}
	written := 0
	for len(p) > 0 {
		n := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf, p, written = w.buf[:len(w.buf)+n], p[n:], written+n
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// flush stores the buffered bytes as the next chunk.
func (w *snapshotSink) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.ss.s.use(func(db *pebble.DB) error {
		return db.Set(w.ss.s.keys.chunkKey(w.ID(), w.rec.Chunks), w.buf, pebble.NoSync) // Set copies
	})
	if err != nil {
		return fmt.Errorf("write snapshot %s chunk %d: %w", w.ID(), w.rec.Chunks, err)
	}
	w.rec.Chunks++
	w.rec.Meta.Size += int64(len(w.buf))
	w.buf = w.buf[:0]
	return nil
}

// Close stores the last chunk and then the metadata with a synced write (a one-entry pebble
// batch), which completes the snapshot; then it deletes snapshots beyond the retain count.
// On failure it deletes the chunks (best effort: Open reaps what is left).
func (w *snapshotSink) Close() error {
	if w.done {
		return nil
	}
	w.done = true
	if err := w.flush(); err != nil {
		_ = w.discard()
		return err
	}
	val, err := json.Marshal(w.rec)
	if err != nil {
		_ = w.discard()
		return fmt.Errorf("encode snapshot %s metadata: %w", w.ID(), err)
	}
	err = w.ss.s.use(func(db *pebble.DB) error {
		return db.Set(w.ss.s.keys.metaKey(w.ID()), append([]byte{snapMetaV1}, val...), pebble.Sync)
	})
	if err != nil {
		_ = w.discard()
		return fmt.Errorf("complete snapshot %s: %w", w.ID(), err)
	}
	w.ss.s.log.Info("snapshot complete", "id", w.ID(), "size", w.rec.Meta.Size,
		"chunks", w.rec.Chunks)
	w.buf = nil

	// The new snapshot is durable whatever happens now; failing to delete old ones only
	// wastes space until the next Close, so it is logged, not returned.
	if err := w.ss.reap(); err != nil {
		w.ss.s.log.Warn("deleting old snapshots failed", "error", err)
	}
	return nil
}

// Cancel abandons the snapshot and deletes its chunks. Called after Close it does nothing.
func (w *snapshotSink) Cancel() error {
	if w.done {
		return nil
	}
	w.done = true
	w.buf = nil
	w.ss.s.log.Info("snapshot canceled", "id", w.ID())
	return w.discard()
}

// discard deletes the chunks written so far. Without fsync: chunks without metadata are
// never listed, and Open deletes any that survive a crash.
func (w *snapshotSink) discard() error {
	lo, hi := w.ss.s.keys.chunkBounds(w.ID())
	err := w.ss.s.use(func(db *pebble.DB) error {
		return db.DeleteRange(lo, hi, pebble.NoSync)
	})
	if err != nil {
		return fmt.Errorf("discard snapshot %s: %w", w.ID(), err)
	}
	return nil
}

// reap deletes complete snapshots beyond the newest retain, metadata and chunks in one batch.
func (ss *SnapshotStore) reap() error {
	return ss.s.use(func(db *pebble.DB) error {
		recs, err := listSnapshots(db, ss.s.keys)
		if err != nil || len(recs) <= ss.retain {
			return err
		}
		b := db.NewBatch()
		defer b.Close()
		for _, r := range recs[ss.retain:] {
			lo, hi := ss.s.keys.chunkBounds(r.Meta.ID)
			if err := errors.Join(b.Delete(ss.s.keys.metaKey(r.Meta.ID), nil),
				b.DeleteRange(lo, hi, nil)); err != nil {
				return err
			}
			ss.s.log.Info("deleting old snapshot", "id", r.Meta.ID)
		}
		return b.Commit(pebble.Sync)
	})
}

// snapshotReader streams a snapshot's chunks from a pebble iterator. It checks that the
// chunks are numbered 0, 1, 2, ... and add up to the recorded size, so a missing chunk is
// io.ErrUnexpectedEOF rather than a silently short snapshot.
type snapshotReader struct {
	s       *Store
	it      *pebble.Iterator
	rec     snapRecord
	started bool
	next    uint64 // number of the next chunk expected
	read    int64
	cur     []byte // unread rest of the current chunk; pebble's memory, valid until it moves
	err     error  // sticky
	closed  bool   // Close was called
}

var errReaderClosed = errors.New("store: snapshot reader is closed")

func (r *snapshotReader) Read(p []byte) (int, error) {
	r.s.life.RLock()
	defer r.s.life.RUnlock()
	if r.s.life.closed {
		return 0, ErrClosed
	}
	if r.closed {
		return 0, errReaderClosed
	}
	for r.err == nil && len(r.cur) == 0 {
		r.err = r.advance()
	}
	if len(r.cur) == 0 {
		return 0, r.err
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	r.read += int64(n)
	return n, nil
}

// advance moves to the next chunk, or returns io.EOF after the last one.
func (r *snapshotReader) advance() error {
	var ok bool
	if r.started {
		ok = r.it.Next()
	} else {
		ok, r.started = r.it.First(), true
	}
	if !ok {
		if err := r.it.Error(); err != nil {
			return err
		}
		if r.next != r.rec.Chunks || r.read != r.rec.Meta.Size {
			return fmt.Errorf("snapshot %s: got %d chunks, %d bytes, want %d, %d: %w",
				r.rec.Meta.ID, r.next, r.read, r.rec.Chunks, r.rec.Meta.Size, io.ErrUnexpectedEOF)
		}
		return io.EOF
	}
	key := r.it.Key()
	if n := binary.BigEndian.Uint64(key[len(key)-8:]); n != r.next {
		return fmt.Errorf("snapshot %s: got chunk %d, want %d: %w",
			r.rec.Meta.ID, n, r.next, io.ErrUnexpectedEOF)
	}
	r.next++
	v, err := r.it.ValueAndErr()
	r.cur = v
	return err
}

// Close releases the reader's iterator. It is idempotent.
func (r *snapshotReader) Close() error {
	r.closed = true
	r.s.readers.Lock()
	defer r.s.readers.Unlock()
	if _, ok := r.s.readers.m[r]; !ok {
		return nil // already closed, by us or by Store.Close
	}
	delete(r.s.readers.m, r)
	r.cur = nil
	return r.it.Close()
}

// listSnapshots returns every complete snapshot of keyspace k, newest first, ordered by
// term, index and ID like raft's file store.
func listSnapshots(db *pebble.DB, k keyspace) ([]snapRecord, error) {
	lo, hi := k.family(prefixSnapMeta)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	var recs []snapRecord
	for ok := it.First(); ok; ok = it.Next() {
		var val []byte
		if val, err = it.ValueAndErr(); err != nil {
			break
		}
		r, err := decodeSnapshotRecord(val) // copies out of pebble's memory
		if err != nil {
			// Fail loudly rather than skip: pebble checksums its blocks, so a bad record
			// means a bug or real corruption, not a torn write.
			return nil, errors.Join(fmt.Errorf("snapshot %s: %w", k.tail(it.Key()), err), it.Close())
		}
		recs = append(recs, r)
	}
	if err = errors.Join(err, it.Error(), it.Close()); err != nil {
		return nil, err
	}
	slices.SortFunc(recs, func(a, b snapRecord) int {
		return cmp.Or(cmp.Compare(b.Meta.Term, a.Meta.Term),
			cmp.Compare(b.Meta.Index, a.Meta.Index), strings.Compare(b.Meta.ID, a.Meta.ID))
	})
	return recs, nil
}

func readSnapshotRecord(db *pebble.DB, k keyspace, id string) (snapRecord, error) {
	val, closer, err := db.Get(k.metaKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return snapRecord{}, ErrSnapshotNotFound
	}
	if err != nil {
		return snapRecord{}, err
	}
	defer closer.Close()
	return decodeSnapshotRecord(val) // json.Unmarshal copies out of val
}

func decodeSnapshotRecord(val []byte) (snapRecord, error) {
	var r snapRecord
	if len(val) == 0 || val[0] != snapMetaV1 {
		return r, errors.New("unknown snapshot metadata version")
	}
	if err := json.Unmarshal(val[1:], &r); err != nil {
		return r, fmt.Errorf("decode snapshot metadata: %w", err)
	}
	return r, nil
}

// reapPartialSnapshots deletes the chunks of keyspace k's snapshots without metadata: sinks
// that were still writing (or being canceled) when the process stopped. It runs in Open,
// before any sink of this process exists.
func reapPartialSnapshots(db *pebble.DB, k keyspace, log *slog.Logger) error {
	lo, hi := k.family(prefixSnapData)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	b := db.NewBatch()
	defer b.Close()
	for ok := it.First(); ok && err == nil; {
		key := it.Key()
		if len(key) < len(k)+1+1+8 {
			err = fmt.Errorf("malformed snapshot chunk key %x", key)
			break
		}
		tail := k.tail(key) // id + '/' + chunk number
		id := string(tail[:len(tail)-9])
		clo, chi := k.chunkBounds(id)
		if _, err = readSnapshotRecord(db, k, id); errors.Is(err, ErrSnapshotNotFound) {
			log.Info("deleting partial snapshot", "id", id)
			err = b.DeleteRange(clo, chi, nil)
		}
		ok = it.SeekGE(chi) // on to the next snapshot's chunks
	}
	if err = errors.Join(err, it.Error(), it.Close()); err != nil {
		return fmt.Errorf("reap partial snapshots: %w", err)
	}
	if b.Empty() {
		return nil
	}
	return b.Commit(pebble.Sync)
}

func (k keyspace) metaKey(id string) []byte {
	return k.key(prefixSnapMeta, []byte(id))
}

// chunkKey is prefixSnapData, the ID, '/', then the big-endian chunk number. IDs never
// contain '/', so "d<id>/" prefixes exactly one snapshot's chunks.
func (k keyspace) chunkKey(id string, n uint64) []byte {
	key := append(k.key(prefixSnapData, []byte(id)), '/')
	return binary.BigEndian.AppendUint64(key, n)
}

// chunkBounds is the [lower, upper) key range of one snapshot's chunks ('0' follows '/').
func (k keyspace) chunkBounds(id string) (lower, upper []byte) {
	lower = append(k.key(prefixSnapData, []byte(id)), '/')
	upper = append(k.key(prefixSnapData, []byte(id)), '0')
	return lower, upper
}
