package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

// smallSegments is a store config whose log rolls over to a new segment every few entries.
func smallSegments(t *testing.T) Config {
	cfg := testConfig(t)
	cfg.SegmentSize = 1024
	return cfg
}

// segmentFiles lists the log's segment files.
func segmentFiles(t *testing.T, cfg Config) []string {
	t.Helper()
	fs := cfg.FS
	if fs == nil {
		fs = vfs.Default
	}
	names, err := fs.List(fs.PathJoin(cfg.Dir, logDirName))
	if err != nil {
		t.Fatal(err)
	}
	var segs []string
	for _, n := range names {
		if strings.HasSuffix(n, segmentSuffix) {
			segs = append(segs, n)
		}
	}
	return segs
}

// writeRaw writes b at off in segment g behind the store's back, as a crash or a disk fault
// would leave it.
func writeRaw(t *testing.T, g *segment, b []byte, off int64) {
	t.Helper()
	if _, err := g.file.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func reopen(t *testing.T, s *Store, cfg Config) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return openStore(t, cfg)
}

// TestSegmentsRollOver: entries spread over many segments, in batches that straddle
// segment ends, read back before and after a restart; compaction removes whole segments.
func TestSegmentsRollOver(t *testing.T) {
	cfg := smallSegments(t)
	s := openStore(t, cfg)
	logs := makeLogs(1, 500, 4)
	for i := 0; i < len(logs); i += 13 {
		mustStore(t, s, logs[i:min(i+13, len(logs))])
	}
	checkBounds(t, s, 1, 500)
	checkLogs(t, s, logs)
	before := len(segmentFiles(t, cfg))
	if before < 10 {
		t.Fatalf("%d segments for 500 entries in 1 KiB segments, want many", before)
	}
	mustDelete(t, s, 1, 250)
	if after := len(segmentFiles(t, cfg)); after >= before-3 {
		t.Fatalf("%d segments after compacting half the log, had %d", after, before)
	}
	s = reopen(t, s, cfg)
	checkBounds(t, s, 251, 500)
	checkLogs(t, s, logs[250:])
	checkMissing(t, s, 250, 501)
	mustStore(t, s, makeLogs(501, 520, 5))
	checkBounds(t, s, 251, 520)
}

// TestLargeEntry: an entry larger than a segment gets a file of its own, between ordinary
// ones.
func TestLargeEntry(t *testing.T) {
	cfg := smallSegments(t)
	s := openStore(t, cfg)
	logs := makeLogs(1, 30, 1)
	logs[10].Data = bytes.Repeat([]byte("large"), 2000) // 10 KB in 1 KiB segments
	mustStore(t, s, logs[:20])
	mustStore(t, s, logs[20:])
	checkLogs(t, s, logs)
	s = reopen(t, s, cfg)
	checkBounds(t, s, 1, 30)
	checkLogs(t, s, logs)
}

// TestGapStartsSegment: raft may store past its last index (after installing a snapshot it
// did not compact up to); the indexes between are missing, before and after a restart.
func TestGapStartsSegment(t *testing.T) {
	cfg := smallSegments(t)
	s := openStore(t, cfg)
	mustStore(t, s, makeLogs(1, 10, 1))
	mustStore(t, s, makeLogs(40, 45, 2))
	check := func(s *Store) {
		t.Helper()
		checkBounds(t, s, 1, 45)
		checkLogs(t, s, makeLogs(1, 10, 1))
		checkLogs(t, s, makeLogs(40, 45, 2))
		checkMissing(t, s, 11, 25, 39, 46)
	}
	check(s)
	s = reopen(t, s, cfg)
	check(s)
	mustDelete(t, s, 1, 20) // compaction across the gap
	checkBounds(t, s, 40, 45)
	s = reopen(t, s, cfg)
	checkBounds(t, s, 40, 45)
}

// TestStoreLogsRejectsOverwrite: raft deletes a conflicting tail before storing over it, so
// an index at or below the last one, or a batch with a hole, is a bug and changes nothing.
func TestStoreLogsRejectsOverwrite(t *testing.T) {
	s := openStore(t, smallSegments(t))
	mustStore(t, s, makeLogs(1, 5, 1))
	if err := s.StoreLogs(makeLogs(5, 6, 2)); err == nil {
		t.Fatal("StoreLogs over index 5 succeeded")
	}
	bad := append(makeLogs(6, 7, 1), makeLogs(9, 9, 1)...)
	if err := s.StoreLogs(bad); err == nil {
		t.Fatal("StoreLogs of 6, 7, 9 succeeded")
	}
	if err := s.DeleteRange(2, 3); err == nil {
		t.Fatal("DeleteRange of the middle succeeded")
	}
	checkBounds(t, s, 1, 5)
	checkLogs(t, s, makeLogs(1, 5, 1))
}

// TestTornTail: bytes of a record that was being written when the process died (here:
// garbage after the last record) are cut off at the next open and zeroed, so records
// appended later are not followed by stale bytes.
func TestTornTail(t *testing.T) {
	cfg := testConfig(t)
	s := openStore(t, cfg)
	mustStore(t, s, makeLogs(1, 20, 1))
	seg := s.wal.segs[0]
	end := seg.end
	// A record for index 21 of which only the header and half the payload reached the disk.
	rec := appendRecord(nil, makeLogs(21, 21, 1)[0])
	writeRaw(t, seg, rec[:len(rec)/2], end)
	// And stray bytes further on.
	writeRaw(t, seg, []byte("stray"), end+4096)
	s = reopen(t, s, cfg)
	checkBounds(t, s, 1, 20)
	checkLogs(t, s, makeLogs(1, 20, 1))
	data := make([]byte, s.wal.segs[0].size-end)
	if _, err := s.wal.segs[0].file.ReadAt(data, end); err != nil {
		t.Fatal(err)
	}
	if !isZero(data) {
		t.Fatal("the torn end was not zeroed")
	}
	mustStore(t, s, makeLogs(21, 22, 2))
	s = reopen(t, s, cfg)
	checkBounds(t, s, 1, 22)
	checkLogs(t, s, makeLogs(21, 22, 2))
}

// TestDamageBeforeTheEnd: a record that does not check out in a segment that is not the
// newest cannot come from a crash (older segments are synced before a newer one is written),
// so Open refuses the store instead of silently dropping entries.
func TestDamageBeforeTheEnd(t *testing.T) {
	cfg := smallSegments(t)
	s := openStore(t, cfg)
	mustStore(t, s, makeLogs(1, 100, 1))
	g := s.wal.segs[0]
	writeRaw(t, g, []byte{0xff}, int64(g.offs[1])+recordHeaderSize+3)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(cfg); err == nil {
		s.Close()
		t.Fatal("Open of a store with a damaged older segment succeeded")
	} else if !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("Open: %v, want a damaged segment", err)
	}
}

// TestMovesPebbleLog: a store written by an earlier version keeps its log in pebble; Open
// moves it (gaps included) into segments and deletes the pebble copy.
func TestMovesPebbleLog(t *testing.T) {
	cfg := smallSegments(t)
	s := openStore(t, cfg)
	old := append(makeLogs(5, 300, 2), makeLogs(400, 410, 3)...)
	b := s.db.NewBatch()
	for _, l := range old {
		if err := b.Set(s.keys.logKey(l.Index), appendLog(nil, l), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, cfg)
	checkBounds(t, s, 5, 410)
	checkLogs(t, s, old)
	checkMissing(t, s, 4, 301, 399, 411)
	checkOnlyMovedKey(t, s)
	s = reopen(t, s, cfg)
	checkBounds(t, s, 5, 410)
	checkLogs(t, s, old)
}

// TestCrashAroundTruncation: a follower's tail truncation across segments and the newer
// term's entries stored over it, then power loss in every way crashCases allow: the log is
// the acknowledged one, and no entry deleted by a returned DeleteRange comes back.
func TestCrashAroundTruncation(t *testing.T) {
	for _, cc := range crashCases {
		t.Run(cc.name, func(t *testing.T) {
			s, cfg, fs := openCrashable(t)
			mustStore(t, s, makeLogs(1, 200, 1))
			mustDelete(t, s, 120, 200)
			newer := makeLogs(120, 150, 2)
			mustStore(t, s, newer[:20])
			mustStore(t, s, newer[20:])
			mustDelete(t, s, 1, 60)
			// Unacknowledged: written, maybe torn, never returned.
			g := s.wal.segs[len(s.wal.segs)-1]
			rec := appendRecord(nil, makeLogs(151, 151, 2)[0])
			writeRaw(t, g, rec[:len(rec)-3], g.end)

			s = openStore(t, crash(t, s, fs, cfg, cc.cfg()))
			checkBounds(t, s, 61, 150)
			checkLogs(t, s, makeLogs(61, 119, 1))
			checkLogs(t, s, newer)
			checkMissing(t, s, 60, 151)
			mustStore(t, s, makeLogs(151, 160, 3))
			checkLogs(t, s, makeLogs(151, 160, 3))
		})
	}
}

// syncCrashFS takes its crash image just before the n-th SyncData after arm, in any file: a
// crash in the middle of a StoreLogs that writes several segments (each chunk is synced before
// the next segment is written).
type syncCrashFS struct {
	*vfs.MemFS
	mu        sync.Mutex
	countdown int // syncs to let through; -1: disarmed
	cfg       vfs.CrashCloneCfg
	image     *vfs.MemFS
}

func (f *syncCrashFS) arm(n int, cfg vfs.CrashCloneCfg) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.countdown, f.cfg, f.image = n, cfg, nil
}

// crashed returns the image taken at the armed sync, or one taken now if the writes did not
// reach that many syncs.
func (f *syncCrashFS) crashed() (image *vfs.MemFS, midway bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.countdown = -1
	if f.image != nil {
		return f.image, true
	}
	return f.MemFS.CrashClone(f.cfg), false
}

func (f *syncCrashFS) beforeSync() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.countdown == 0 && f.image == nil {
		f.image = f.MemFS.CrashClone(f.cfg)
	}
	if f.countdown > 0 {
		f.countdown--
	}
}

func (f *syncCrashFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.MemFS.Create(name, c)
	return syncCrashFile{file, f}, err
}

func (f *syncCrashFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	file, err := f.MemFS.OpenReadWrite(name, c, opts...)
	return syncCrashFile{file, f}, err
}

type syncCrashFile struct {
	vfs.File
	fs *syncCrashFS
}

func (f syncCrashFile) SyncData() error {
	f.fs.beforeSync()
	return f.File.SyncData()
}

// TestCrashMidAppend: power loss before one of the syncs of a batch that spans several
// segments (or after the batch): what is left is the acknowledged entries and a prefix of the
// batch, with no hole.
func TestCrashMidAppend(t *testing.T) {
	for _, cc := range crashCases {
		t.Run(cc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 7))
			midway := 0
			for round := range 30 {
				cfg, mem := crashConfig(t)
				fs := &syncCrashFS{MemFS: mem, countdown: -1}
				cfg.FS = fs
				s := openStore(t, cfg)
				acked := makeLogs(1, 40, 1)
				mustStore(t, s, acked)
				batch := makeLogs(41, 41+uint64(rng.IntN(150)), 1)
				fs.arm(rng.IntN(8), cc.cfg())
				mustStore(t, s, batch)
				image, mid := fs.crashed()
				if mid {
					midway++
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				cfg.FS = image
				s = openStore(t, cfg)
				first, _ := s.FirstIndex()
				last, _ := s.LastIndex()
				if first != 1 || last < 40 || last > batch[len(batch)-1].Index {
					t.Fatalf("round %d: bounds [%d, %d] after a crash while storing [41, %d]",
						round, first, last, batch[len(batch)-1].Index)
				}
				checkLogs(t, s, acked)
				checkLogs(t, s, batch[:last-40])
			}
			if midway < 5 {
				t.Fatalf("only %d of 30 crashes landed inside the batch", midway)
			}
		})
	}
}

// TestConcurrentReadsDuringWrites: raft's replication goroutines read while the main loop
// appends and the snapshot goroutine compacts (run under -race).
func TestConcurrentReadsDuringWrites(t *testing.T) {
	s := openStore(t, smallSegments(t))
	mustStore(t, s, makeLogs(1, 10, 1))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				first, _ := s.FirstIndex()
				last, _ := s.LastIndex()
				if last < first {
					continue
				}
				i := first + rng.Uint64N(last-first+1)
				var l raft.Log
				// Compaction may have removed i meanwhile; anything else is a bug.
				if err := s.GetLog(i, &l); err != nil && err != raft.ErrLogNotFound {
					t.Errorf("GetLog(%d): %v", i, err)
					return
				}
				if l.Index != 0 && string(l.Data) != fmt.Sprintf("cmd-1-%d", i) {
					t.Errorf("GetLog(%d) = %q", i, l.Data)
					return
				}
			}
		})
	}
	for i := uint64(11); i <= 1000; i += 10 {
		mustStore(t, s, makeLogs(i, i+9, 1))
		if i%100 == 1 {
			mustDelete(t, s, 1, i-50)
		}
	}
	close(stop)
	wg.Wait()
	checkBounds(t, s, 852, 1000) // the last compaction, at 901, deleted through 851
}

// checkOnlyMovedKey: pebble's old log family holds only the logMoved key, which earlier
// versions' Open (logBounds → logIndex on the first and last key of the family) rejects.
func checkOnlyMovedKey(t *testing.T, s *Store) {
	t.Helper()
	if n := countKeys(t, s, prefixLog); n != 1 {
		t.Fatalf("%d keys in pebble's old log family, want only the moved marker", n)
	}
	if _, closer, err := s.db.Get(s.keys.logMoved()); err != nil {
		t.Fatalf("moved marker: %v", err)
	} else {
		closer.Close()
	}
	if _, err := s.keys.logIndex(s.keys.logMoved()); err == nil {
		t.Fatal("logIndex accepts the moved marker: an older binary would start on an empty log")
	}
}

// TestNewStoreMarksLogMoved: a store this version creates is refused by earlier ones too.
func TestNewStoreMarksLogMoved(t *testing.T) {
	cfg := testConfig(t)
	s := openStore(t, cfg)
	mustStore(t, s, makeLogs(1, 3, 1))
	checkOnlyMovedKey(t, s)
	s = reopen(t, s, cfg)
	checkOnlyMovedKey(t, s)
	checkLogs(t, s, makeLogs(1, 3, 1))
}
