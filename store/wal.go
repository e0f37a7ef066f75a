package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/metrics"
)

// The raft log lives in its own write-ahead log, beside pebble: a directory of segment files,
// each zero-filled and fsynced to its full size before its first record is written. Writing
// into a file whose size and blocks are already durable makes every append's fdatasync a
// pure data flush, with no journal commit for a changed size or a newly allocated block, and
// it runs on the caller's goroutine: it takes less than pebble's synced batch or an append to a
// growing file (docs/performance.md has the measurement). Every commit pays it, twice in a row
// on a 3-node cluster (leader, then follower).
//
// A segment's name is the index of its first record. A record is
//
//	uint32 little-endian  n = len(payload)
//	uint32 little-endian  CRC-32C of the 4 length bytes and the payload
//	payload: uint64 little-endian index, then the entry as appendLog encodes it
//
// and records follow each other with consecutive indexes. The first zero length ends a
// segment. A log with a gap (raft stores past its last index after installing a snapshot)
// starts a new segment at the gap.
//
// Durability order, which recovery relies on:
//   - a segment receives records only after the records before them, in older segments too,
//     are synced: so only the newest segment can end in a torn record, which recovery cuts
//     off and zeroes;
//   - deleting a tail removes whole segments newest first, each removal synced, then zeroes
//     and syncs the cut part of the segment that is left: a crash leaves a prefix of the log,
//     never a log with a hole in it;
//   - deleting a head first makes the new lowest index (the floor) durable in pebble, then
//     removes segments: entries below the floor are never seen again, even in a segment a
//     crash kept.
const (
	walDirName         = "wal"
	segmentSuffix      = ".seg"
	spareSegmentName   = "spare.tmp"
	largeSegmentName   = "large.tmp"
	recordHeaderSize   = 8
	recordIndexSize    = 8
	zeroChunkSize      = 1 << 20
	maxKeptBuffer      = 1 << 20
	maxWALRecordLength = 1 << 30

	// DefaultSegmentSize is the size of one log segment file. Zero-filling the next one runs
	// in the background while the current one fills.
	DefaultSegmentSize int64 = 8 << 20
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// segment is one file of the log. Its offs, end and (for the newest) its presence in
// wal.segs change under wal.mu; the file's bytes past end change only under wal.writeMu.
type segment struct {
	name  string
	file  vfs.File
	first uint64   // index of the first record, as the name says
	offs  []uint32 // offs[i] is where record first+i starts
	end   int64    // just past the last record: where the next one goes
	size  int64    // the file's size; zero from end on
}

// next is the index the segment's next record must have.
func (g *segment) next() uint64 { return g.first + uint64(len(g.offs)) }

// recordEnd is where record i (0-based in the segment) ends.
func (g *segment) recordEnd(i int) int64 {
	if i+1 < len(g.offs) {
		return int64(g.offs[i+1])
	}
	return g.end
}

// spare is the next segment's file, zero-filled in the background.
type spare struct {
	done chan struct{} // closed when file and err are set
	// noSpace is closed when an attempt found the disk full: the preparation goes on trying
	// (fault.go), and a write that needs the file now is refused instead of waiting for space.
	noSpace chan struct{}
	full    error // set before noSpace is closed
	file    vfs.File
	err     error
}

// wal is raft's log store. StoreLogs, DeleteRange and Close run one at a time (writeMu);
// GetLog and the bounds never wait for a write's fsync.
type wal struct {
	fs      vfs.FS
	dir     string
	segSize int64
	log     *slog.Logger
	syncs   *metrics.Histogram

	// readFloor and writeFloor read and durably write (in pebble) the lowest index of the log.
	readFloor  func() (uint64, error)
	writeFloor func(uint64) error

	// failed is the error that poisoned the log for good; full, while the disk has no space for
	// the next segment (fault.go). retry is how often the spare is tried again (spareRetry);
	// stop ends those tries at Close.
	failed atomic.Pointer[error]
	full   atomic.Pointer[error]
	retry  time.Duration
	stop   chan struct{}

	writeMu sync.Mutex
	closed  bool // under writeMu and mu
	floor   uint64
	spare   *spare
	buf     []byte // record encoding buffer
	ends    []int  // ends[i]: where record i ends in buf

	mu          sync.RWMutex
	segs        []*segment // ascending by first index; the last one receives appends
	first, last atomic.Uint64
}

// open creates the log's directory if needed and recovers the log in it: a torn record at the
// end of the newest segment is cut off and zeroed, an empty newest segment is removed, and
// entries below the durable floor are hidden. The caller has set every field above writeMu.
func (w *wal) open() error {
	w.stop = make(chan struct{})
	if w.retry == 0 {
		w.retry = spareRetry
	}
	if err := w.makeDir(); err != nil {
		return fmt.Errorf("open wal: %w", err)
	}
	if err := w.recover(); err != nil {
		w.closeFiles()
		return fmt.Errorf("open wal %s: %w", w.dir, err)
	}
	w.prepareSpare()
	return nil
}

// makeDir creates the log's directory and makes its entry in the parent durable, or a
// crash could lose the whole log with it.
func (w *wal) makeDir() error {
	if err := w.fs.MkdirAll(w.dir, 0o755); err != nil {
		return err
	}
	parent, err := w.fs.OpenDir(w.fs.PathDir(w.dir))
	if err != nil {
		return err
	}
	return errors.Join(parent.Sync(), parent.Close())
}

func (w *wal) recover() error {
	names, err := w.fs.List(w.dir)
	if err != nil {
		return err
	}
	var firsts []uint64
	for _, name := range names {
		if strings.HasSuffix(name, ".tmp") { // a spare or large file being prepared
			if err := w.fs.Remove(w.path(name)); err != nil {
				return err
			}
			continue
		}
		idx, ok := strings.CutSuffix(name, segmentSuffix)
		first, err := strconv.ParseUint(idx, 10, 64)
		if !ok || err != nil || segmentName(first) != name {
			return fmt.Errorf("unexpected file %q in the log directory", name)
		}
		firsts = append(firsts, first)
	}
	slices.Sort(firsts)
	for i, first := range firsts {
		newest := i == len(firsts)-1
		g, err := w.openSegment(first, newest)
		if err != nil {
			return err
		}
		if g == nil { // newest and empty: created, then a crash before its first record
			continue
		}
		if n := len(w.segs); n > 0 && g.first < w.segs[n-1].next() {
			g.file.Close()
			return fmt.Errorf("segment %s overlaps %s", g.name, w.segs[n-1].name)
		}
		w.segs = append(w.segs, g)
	}
	if w.floor, err = w.readFloor(); err != nil {
		return err
	}
	// Segments wholly below the floor are leftovers of a compaction a crash interrupted.
	for len(w.segs) > 0 && w.segs[0].next() <= w.floor {
		g := w.segs[0]
		w.segs = w.segs[1:]
		if err := errors.Join(g.file.Close(), w.fs.Remove(w.path(g.name))); err != nil {
			return err
		}
	}
	w.setBounds()
	return nil
}

// openSegment reads a segment and indexes its records. A newest segment that ends in a
// torn or partly written record is cut there and its rest zeroed; an empty newest segment is
// removed (nil, nil). Damage anywhere else is an error: the write order makes it impossible
// without a disk fault.
func (w *wal) openSegment(first uint64, newest bool) (*segment, error) {
	name := segmentName(first)
	f, err := w.fs.OpenReadWrite(w.path(name), vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	data := make([]byte, info.Size())
	if _, err := f.ReadAt(data, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("read segment %s: %w", name, err)
	}
	g := &segment{name: name, file: f, first: first, size: int64(len(data))}
	for {
		payload, ok := parseRecord(data[g.end:])
		if !ok || binary.LittleEndian.Uint64(payload) != g.next() {
			break
		}
		g.offs = append(g.offs, uint32(g.end))
		g.end += int64(recordHeaderSize + len(payload))
	}
	clean := isZero(data[g.end:])
	switch {
	case clean && len(g.offs) > 0:
		return g, nil
	case !newest:
		f.Close()
		return nil, fmt.Errorf("segment %s is damaged at offset %d", name, g.end)
	case len(g.offs) == 0: // no whole record: its first write was under way
		return nil, errors.Join(f.Close(), w.fs.Remove(w.path(name)), w.syncDir())
	}
	w.log.Warn("raft log ends in a torn record, cut off", "segment", name,
		"offset", g.end, "last_index", g.next()-1)
	if err := zeroRange(f, g.end, g.size); err != nil {
		f.Close()
		return nil, fmt.Errorf("zero the torn end of %s: %w", name, err)
	}
	return g, nil
}

// parseRecord returns the payload of the record at the start of b, or false if b does not
// start with a whole, intact record.
func parseRecord(b []byte) ([]byte, bool) {
	if len(b) < recordHeaderSize {
		return nil, false
	}
	n := binary.LittleEndian.Uint32(b)
	if n < recordIndexSize || int64(n) > int64(len(b)-recordHeaderSize) {
		return nil, false
	}
	sum := crc32.Update(crc32.Checksum(b[:4], crc32c), crc32c, b[recordHeaderSize:recordHeaderSize+n])
	if sum != binary.LittleEndian.Uint32(b[4:]) {
		return nil, false
	}
	return b[recordHeaderSize : recordHeaderSize+n], true
}

// appendRecord appends l's record to dst.
func appendRecord(dst []byte, l *raft.Log) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, recordHeaderSize)...)
	dst = binary.LittleEndian.AppendUint64(dst, l.Index)
	dst = appendLog(dst, l)
	rec := dst[start:]
	binary.LittleEndian.PutUint32(rec, uint32(len(rec)-recordHeaderSize))
	sum := crc32.Update(crc32.Checksum(rec[:4], crc32c), crc32c, rec[recordHeaderSize:])
	binary.LittleEndian.PutUint32(rec[4:], sum)
	return dst
}

// StoreLogs appends entries and returns once they are on disk. Entries must have consecutive
// indexes after the last stored one; an index past last+1 (raft after a snapshot install)
// starts a new segment at the gap.
func (w *wal) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if e := w.failed.Load(); e != nil {
		return *e
	}
	if last := w.last.Load(); last != 0 && logs[0].Index <= last {
		return fmt.Errorf("index %d is not after the last stored index %d", logs[0].Index, last)
	}
	buf, ends := w.buf[:0], w.ends[:0]
	for i, l := range logs {
		if i > 0 && l.Index != logs[i-1].Index+1 {
			return fmt.Errorf("indexes %d and %d are not consecutive", logs[i-1].Index, l.Index)
		}
		buf = appendRecord(buf, l)
		if n := len(buf) - recordStart(ends, i); n > maxWALRecordLength {
			return fmt.Errorf("entry %d is %d bytes, more than %d", l.Index, n, maxWALRecordLength)
		}
		ends = append(ends, len(buf))
	}
	if cap(buf) <= maxKeptBuffer { // keep the buffer for the next call unless a rare large batch grew it
		w.buf, w.ends = buf, ends
	}
	start := time.Now()
	defer w.syncs.Since(start)

	var cur *segment
	if n := len(w.segs); n > 0 {
		cur = w.segs[n-1]
	}
	from := 0 // logs[from:] are not written yet
	for from < len(logs) {
		begin := 0
		if from > 0 {
			begin = ends[from-1]
		}
		fresh := false
		if cur == nil || logs[from].Index != cur.next() || cur.end+int64(ends[from]-begin) > cur.size {
			g, err := w.startSegment(logs[from].Index, int64(ends[from]-begin))
			if err != nil {
				if from > 0 && errors.Is(err, ErrDiskFull) {
					// Refused as a whole: raft takes the call as failed, and must not find
					// part of it stored past the last index it knows.
					if uerr := w.truncateFrom(logs[0].Index); uerr != nil {
						return uerr
					}
				}
				return err
			}
			cur, fresh = g, true
		}
		to := from + 1 // logs[from:to] go to cur
		for to < len(logs) && cur.end+int64(ends[to]-begin) <= cur.size {
			to++
		}
		if err := writeSynced(cur.file, buf[begin:ends[to-1]], cur.end); err != nil {
			if fresh { // named and synced, empty: recovery removes it, as after a crash
				cur.file.Close()
			}
			return w.fail(fmt.Errorf("write segment %s: %w", cur.name, err))
		}
		w.mu.Lock()
		for i := from; i < to; i++ {
			cur.offs = append(cur.offs, uint32(cur.end+int64(recordStart(ends, i)-begin)))
		}
		cur.end += int64(ends[to-1] - begin)
		if fresh {
			w.segs = append(w.segs, cur)
		}
		w.setBounds()
		w.mu.Unlock()
		from = to
	}
	return nil
}

func recordStart(ends []int, i int) int {
	if i == 0 {
		return 0
	}
	return ends[i-1]
}

// startSegment makes the file for a segment whose first record is index and need bytes
// long: the spare, or a file of its own for a record larger than a segment. The caller
// publishes it once the first records are synced. An error wraps ErrDiskFull (no space for the
// file: nothing changed) or ErrDiskFailed (the log is poisoned).
func (w *wal) startSegment(index uint64, need int64) (*segment, error) {
	var f vfs.File
	var err error
	tmp := spareSegmentName
	size := w.segSize
	if need > size {
		tmp, size = largeSegmentName, need
		f, err = w.createZeroed(tmp, size)
	} else {
		sp := w.spare
		select {
		case <-sp.done:
		case <-sp.noSpace:
			select {
			case <-sp.done: // ready after all
			default:
				return nil, sp.full
			}
		}
		f, err = sp.file, sp.err
		w.spare = nil
		defer w.prepareSpare()
	}
	switch {
	case err != nil && isNoSpace(err):
		return nil, &DiskError{Full: true, Err: fmt.Errorf("prepare a log segment: %w", err)}
	case err != nil:
		return nil, w.fail(fmt.Errorf("prepare a log segment: %w", err))
	}
	if index < w.floor { // raft restarts its log below the old floor: never hide it
		if err := w.writeFloor(index); err != nil {
			f.Close()
			return nil, w.fail(fmt.Errorf("lower the log floor to %d: %w", index, err))
		}
		w.floor = index
	}
	name := segmentName(index)
	if err := w.fs.Rename(w.path(tmp), w.path(name)); err != nil {
		f.Close()
		return nil, w.fail(fmt.Errorf("name log segment %s: %w", name, err))
	}
	if err := w.syncDir(); err != nil {
		f.Close()
		return nil, w.fail(fmt.Errorf("sync the log directory: %w", err))
	}
	return &segment{name: name, file: f, first: index, size: size}, nil
}

// prepareSpare starts zero-filling the next segment's file in the background. While the disk
// is full it tries again every w.retry until it succeeds or the log closes, and says so in
// Health meanwhile (fault.go). Any other error is the spare's, which the next segment's
// start reports.
func (w *wal) prepareSpare() {
	sp := &spare{done: make(chan struct{}), noSpace: make(chan struct{})}
	w.spare = sp
	go func() {
		for tries := 0; ; tries++ {
			sp.file, sp.err = w.createZeroed(spareSegmentName, w.segSize)
			if sp.err == nil || !isNoSpace(sp.err) {
				// done first: a write that Health lets through must find the spare ready.
				close(sp.done)
				w.full.Store(nil)
				if tries > 0 && sp.err == nil {
					w.log.Info("raft log disk has space again: writes are taken", "dir", w.dir, "tries", tries+1)
				}
				return
			}
			if tries == 0 {
				sp.full = &DiskError{Full: true, Err: fmt.Errorf("no space for the next raft log segment (%d bytes): %w", w.segSize, sp.err)}
				w.full.Store(&sp.full)
				close(sp.noSpace)
				w.log.Error("raft log disk full: writes are refused until space is freed", "dir", w.dir,
					"segment_bytes", w.segSize, "err", sp.err, "retry_every", w.retry)
			}
			select {
			case <-w.stop:
				close(sp.done) // sp.err stays: Close finds no file to close
				return
			case <-time.After(w.retry):
			}
		}
	}()
}

// createZeroed creates name with size zero bytes, synced: size and blocks are durable, so
// later writes into it change no metadata.
func (w *wal) createZeroed(name string, size int64) (vfs.File, error) {
	f, err := w.fs.Create(w.path(name), vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, err
	}
	zeros := make([]byte, min(size, zeroChunkSize))
	for off := int64(0); off < size; off += int64(len(zeros)) {
		if _, err = f.Write(zeros[:min(int64(len(zeros)), size-off)]); err != nil {
			break
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		// Removed, not left for recovery: on a full disk its blocks are the space a retry needs.
		f.Close()
		if rerr := w.fs.Remove(w.path(name)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			w.log.Warn("could not remove a log segment file that failed to prepare", "file", name, "err", rerr)
		}
		return nil, err
	}
	return f, nil
}

// GetLog reads the entry at index into out, or returns raft.ErrLogNotFound.
func (w *wal) GetLog(index uint64, out *raft.Log) error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return ErrClosed
	}
	if index == 0 || index < w.first.Load() || index > w.last.Load() {
		return raft.ErrLogNotFound
	}
	i := sort.Search(len(w.segs), func(i int) bool { return w.segs[i].first > index }) - 1
	if i < 0 || index >= w.segs[i].next() {
		return raft.ErrLogNotFound // in a gap
	}
	g := w.segs[i]
	r := int(index - g.first)
	rec := make([]byte, g.recordEnd(r)-int64(g.offs[r]))
	if _, err := g.file.ReadAt(rec, int64(g.offs[r])); err != nil {
		return fmt.Errorf("read log %d: %w", index, err)
	}
	payload, ok := parseRecord(rec)
	if !ok || binary.LittleEndian.Uint64(payload) != index {
		return fmt.Errorf("read log %d: record in %s at offset %d is damaged", index, g.name, g.offs[r])
	}
	if err := decodeOwnedLog(payload[recordIndexSize:], out); err != nil {
		return fmt.Errorf("decode log %d: %w", index, err)
	}
	out.Index = index
	return nil
}

// DeleteRange deletes [lo, hi], which raft only ever makes a head of the log (compaction
// after a snapshot) or a tail (a follower dropping entries that conflict with the leader's).
func (w *wal) DeleteRange(lo, hi uint64) error {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if e := w.failed.Load(); e != nil {
		return *e
	}
	first, last := w.first.Load(), w.last.Load()
	switch {
	case lo > hi || first == 0 || hi < first || lo > last:
		return nil // nothing stored in the range
	case hi >= last:
		if full := w.full.Load(); full != nil {
			// A follower drops a conflicting tail and then stores the leader's entries in their
			// place. Were the delete done and the store refused, raft would go on believing in
			// the tail it deleted (its last index is set only by a store), and every later
			// append would miss it, even once space returns: refuse both, so raft keeps a log
			// it can find and the leader sends again.
			return *full
		}
		return w.truncateFrom(max(lo, first))
	case lo <= first:
		return w.compactThrough(hi)
	default:
		return fmt.Errorf("only a head or a tail of the log [%d, %d] can be deleted", first, last)
	}
}

// truncateFrom deletes index lo and everything after it.
func (w *wal) truncateFrom(lo uint64) error {
	for len(w.segs) > 0 {
		g := w.segs[len(w.segs)-1]
		if g.first < lo {
			break
		}
		w.mu.Lock()
		w.segs = w.segs[:len(w.segs)-1]
		w.setBounds()
		w.mu.Unlock()
		// Synced one by one, newest first: a crash leaves a prefix of the log.
		if err := errors.Join(g.file.Close(), w.fs.Remove(w.path(g.name)), w.syncDir()); err != nil {
			return w.fail(fmt.Errorf("remove log segment %s: %w", g.name, err))
		}
	}
	if len(w.segs) == 0 {
		return nil
	}
	g := w.segs[len(w.segs)-1]
	if lo >= g.next() {
		return nil
	}
	cut, end := int64(g.offs[lo-g.first]), g.end
	w.mu.Lock()
	g.offs, g.end = g.offs[:lo-g.first], cut
	w.setBounds()
	w.mu.Unlock()
	if err := zeroRange(g.file, cut, end); err != nil {
		return w.fail(fmt.Errorf("zero log segment %s from offset %d: %w", g.name, cut, err))
	}
	return nil
}

// compactThrough deletes every entry up to hi, which is below the last index.
func (w *wal) compactThrough(hi uint64) error {
	if hi+1 > w.floor {
		if err := w.writeFloor(hi + 1); err != nil {
			return w.fail(fmt.Errorf("raise the log floor to %d: %w", hi+1, err))
		}
		w.floor = hi + 1
	}
	w.mu.Lock()
	var gone []*segment
	for len(w.segs) > 1 && w.segs[0].next() <= w.floor {
		gone = append(gone, w.segs[0])
		w.segs = w.segs[1:]
	}
	w.setBounds()
	w.mu.Unlock()
	// No directory sync: a segment a crash brings back is below the durable floor.
	var errs []error
	for _, g := range gone {
		errs = append(errs, g.file.Close(), w.fs.Remove(w.path(g.name)))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove compacted log segments: %w", err)
	}
	return nil
}

// setBounds recomputes first and last from the segments and the floor. Callers hold mu or
// are alone (recovery).
func (w *wal) setBounds() {
	if len(w.segs) == 0 {
		w.first.Store(0)
		w.last.Store(0)
		return
	}
	// Recovery and compactThrough drop every segment wholly below the floor (compaction
	// never reaches the last index), so segs[0] holds the floor's index or starts above it.
	w.first.Store(max(w.segs[0].first, w.floor))
	w.last.Store(w.segs[len(w.segs)-1].next() - 1)
}

// size is the bytes of records stored and the bytes of files on disk (segments and spare).
func (w *wal) size() (records, files int64) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	for _, g := range w.segs {
		records += g.end
		files += g.size
	}
	return records, files + w.segSize
}

// Close waits for the spare being prepared and closes every file. It is idempotent.
func (w *wal) Close() error {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	if w.closed {
		return nil
	}
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	close(w.stop) // a spare waiting for space gives up
	return w.closeFiles()
}

func (w *wal) closeFiles() error {
	var errs []error
	if sp := w.spare; sp != nil {
		<-sp.done
		if sp.file != nil {
			errs = append(errs, sp.file.Close())
		}
		w.spare = nil
	}
	for _, g := range w.segs {
		errs = append(errs, g.file.Close())
	}
	return errors.Join(errs...)
}

// reset deletes the whole log: used before moving a log kept in pebble (by earlier
// versions) into the segments.
func (w *wal) reset() error {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	return w.truncateFrom(0)
}

func (w *wal) path(name string) string { return w.fs.PathJoin(w.dir, name) }

func (w *wal) syncDir() error {
	d, err := w.fs.OpenDir(w.dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

func segmentName(first uint64) string { return fmt.Sprintf("%020d%s", first, segmentSuffix) }

// writeSynced writes b at off and fdatasyncs the file.
func writeSynced(f vfs.File, b []byte, off int64) error {
	if _, err := f.WriteAt(b, off); err != nil {
		return err
	}
	return f.SyncData()
}

// zeroRange overwrites [from, to) with zeros and syncs the file.
func zeroRange(f vfs.File, from, to int64) error {
	zeros := make([]byte, min(to-from, zeroChunkSize))
	for off := from; off < to; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), to-off)], off); err != nil {
			return err
		}
	}
	return f.SyncData()
}

func isZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroPage))
		if !bytes.Equal(b[:n], zeroPage[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

var zeroPage = make([]byte, 64<<10)
