package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/raftlock/raftlock/tests/testutil"
)

// faultConfig is a config with small segments on an in-memory filesystem whose raft log
// directory can be made full or broken.
func faultConfig(t *testing.T) (Config, *testutil.FaultFS) {
	t.Helper()
	fs := testutil.NewFaultFS(vfs.NewMem(), logDirName)
	cfg := testConfig(t)
	cfg.Dir, cfg.FS = "db", fs
	cfg.SegmentSize = 1024 // about twenty entries of makeLogs
	return cfg, fs
}

// spareReady waits until the log's next segment file is prepared (or failed).
func spareReady(s *Store) {
	s.wal.writeMu.Lock()
	sp := s.wal.spare
	s.wal.writeMu.Unlock()
	<-sp.done
}

// TestFailedWritePoisonsTheLog: once a write or sync of the log failed, every later write
// fails with the same error even after the disk works again (a retried fsync proves nothing),
// Health says so, and a restart on the repaired disk finds every entry stored before.
func TestFailedWritePoisonsTheLog(t *testing.T) {
	cfg, fs := faultConfig(t)
	s := openStore(t, cfg)
	mustStore(t, s, makeLogs(1, 10, 1))

	fs.Break()
	err := s.StoreLogs(makeLogs(11, 11, 1))
	if !errors.Is(err, ErrDiskFailed) {
		t.Fatalf("StoreLogs on a broken disk = %v, want ErrDiskFailed", err)
	}
	fs.Repair()
	for _, op := range []struct {
		name string
		do   func() error
	}{
		{"StoreLogs", func() error { return s.StoreLogs(makeLogs(11, 11, 1)) }},
		{"DeleteRange of the head", func() error { return s.DeleteRange(1, 5) }},
		{"DeleteRange of the tail", func() error { return s.DeleteRange(8, 10) }},
		{"Health", s.Health},
	} {
		if got := op.do(); !errors.Is(got, ErrDiskFailed) || errors.Is(got, ErrDiskFull) {
			t.Errorf("%s after the disk was repaired = %v, want the sticky ErrDiskFailed", op.name, got)
		}
	}
	checkBounds(t, s, 1, 10)
	checkLogs(t, s, makeLogs(1, 10, 1)) // reads go on

	s = reopen(t, s, cfg) // the operator's way back: a restart
	if err := s.Health(); err != nil {
		t.Fatalf("Health after restart = %v, want nil", err)
	}
	checkBounds(t, s, 1, 10)
	checkLogs(t, s, makeLogs(1, 10, 1))
	mustStore(t, s, makeLogs(11, 30, 1))
}

// TestFullDiskRefusesAndRecovers: with no space for the next segment, Health reports a full
// disk while the current segment still takes entries (the reserve); a write that needs the
// next segment is refused whole, the part of it already written into the current segment cut
// off again; and once space is freed the log prepares its spare by itself (after spareRetry)
// and takes the same write.
func TestFullDiskRefusesAndRecovers(t *testing.T) {
	cfg, fs := faultConfig(t)
	s := openStore(t, cfg)
	mustStore(t, s, makeLogs(1, 5, 1))
	spareReady(s)
	fs.SetFull(true)

	// Fill segments until one takes the spare: its replacement finds the disk full.
	next := uint64(6)
	testutil.WaitFor(t, 2*time.Second, func() error {
		mustStore(t, s, makeLogs(next, next, 1))
		next++
		if err := s.Health(); !errors.Is(err, ErrDiskFull) {
			return fmt.Errorf("Health = %v after entry %d, want ErrDiskFull", err, next-1)
		}
		return nil
	})
	if errors.Is(s.Health(), ErrDiskFailed) {
		t.Fatalf("a full disk poisoned the log: %v", s.Health())
	}
	// The reserve: the current segment still has room, and takes an entry.
	mustStore(t, s, makeLogs(next, next, 1))
	last := next
	// A batch larger than what is left in the segment needs the next one.
	batch := makeLogs(last+1, last+40, 1)
	err := s.StoreLogs(batch)
	if !errors.Is(err, ErrDiskFull) || errors.Is(err, ErrDiskFailed) {
		t.Fatalf("StoreLogs needing a new segment on a full disk = %v, want ErrDiskFull only", err)
	}
	checkBounds(t, s, 1, last) // nothing of the batch kept, not even its first part
	checkMissing(t, s, last+1, last+2)
	if got := s.StoreLogs(batch); !errors.Is(got, ErrDiskFull) {
		t.Fatalf("StoreLogs again while full = %v, want ErrDiskFull", got)
	}
	// Nothing of the refused batch comes back after a restart: its first part, written into
	// the current segment, was zeroed again (not only dropped from memory).
	s = reopen(t, s, cfg)
	checkBounds(t, s, 1, last)
	// A follower's tail delete is refused while the disk is full: raft deletes a conflicting
	// tail and then stores in its place, and must not be left believing in a deleted tail.
	// (The reopened log finds the disk full as its first spare fails.)
	testutil.WaitFor(t, 3*spareRetry, func() error {
		if s.Health() == nil {
			return errors.New("the reopened log has not found the disk full yet")
		}
		return nil
	})
	if err := s.DeleteRange(last, last); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("DeleteRange of the tail while full = %v, want ErrDiskFull", err)
	}
	checkBounds(t, s, 1, last)

	fs.SetFull(false)
	start := time.Now()
	testutil.WaitFor(t, 3*spareRetry, func() error { return s.Health() })
	t.Logf("recovered %v after space was freed", time.Since(start).Round(time.Millisecond))
	mustStore(t, s, batch)
	s = reopen(t, s, cfg)
	checkBounds(t, s, 1, last+40)
	checkLogs(t, s, append(makeLogs(1, last, 1), batch...))
}
