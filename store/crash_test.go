package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

// crashCases are the ways a crash may treat data that was written but not fsynced: lose all
// of it, or keep a random part (torn writes, some directory entries but not others). Only
// the synced state is promised, so the checks must pass in every case.
var crashCases = []struct {
	name string
	cfg  func() vfs.CrashCloneCfg
}{
	{"only synced data survives", func() vfs.CrashCloneCfg { return vfs.CrashCloneCfg{} }},
	{"some unsynced data survives", func() vfs.CrashCloneCfg {
		return vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(1, 1))}
	}},
	{"all unsynced data survives", func() vfs.CrashCloneCfg {
		return vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 1))}
	}},
}

// crashConfig is a config on a crashable in-memory filesystem.
func crashConfig(t *testing.T) (Config, *vfs.MemFS) {
	t.Helper()
	fs := vfs.NewCrashableMem()
	cfg := testConfig(t)
	cfg.Dir, cfg.FS = "db", fs
	cfg.SegmentSize = 2048 // a few dozen entries per segment: crashes land around rollovers
	return cfg, fs
}

// openCrashable opens a store on a crashable filesystem; crash closes it.
func openCrashable(t *testing.T) (*Store, Config, *vfs.MemFS) {
	t.Helper()
	cfg, fs := crashConfig(t)
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, cfg, fs
}

// crash simulates power loss on a running store: it returns a config on the filesystem
// as a crash would leave it, and then closes the original store (whose later writes can no
// longer reach the clone).
func crash(t *testing.T, s *Store, fs *vfs.MemFS, cfg Config, cc vfs.CrashCloneCfg) Config {
	t.Helper()
	crashed := fs.CrashClone(cc)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	cfg.FS = crashed
	return cfg
}

// TestCrashAfterStoreLogs: whatever StoreLogs, DeleteRange and Set returned before the
// crash is there after it.
func TestCrashAfterStoreLogs(t *testing.T) {
	for _, cc := range crashCases {
		t.Run(cc.name, func(t *testing.T) {
			s, cfg, fs := openCrashable(t)
			logs := makeLogs(1, 300, 2)
			for i := 0; i < len(logs); i += 7 { // many small batches, like raft's
				mustStore(t, s, logs[i:min(i+7, len(logs))])
			}
			mustDelete(t, s, 1, 50)
			mustDelete(t, s, 281, 300)
			if err := s.SetUint64([]byte("CurrentTerm"), 2); err != nil {
				t.Fatal(err)
			}

			s = openStore(t, crash(t, s, fs, cfg, cc.cfg()))
			checkBounds(t, s, 51, 280)
			checkLogs(t, s, logs[50:280])
			checkMissing(t, s, 50, 281)
			if term, err := s.GetUint64([]byte("CurrentTerm")); err != nil || term != 2 {
				t.Fatalf("GetUint64(CurrentTerm) = %d, %v, want 2, nil", term, err)
			}
		})
	}
}

// TestCrashMidSnapshot: a crash while a sink is written but not closed leaves a store that
// opens, lists only the previous complete snapshot, reads it back byte for byte and has
// deleted the half-written one's chunks.
func TestCrashMidSnapshot(t *testing.T) {
	for _, cc := range crashCases {
		for _, syncAfter := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/sync after partial=%v", cc.name, syncAfter), func(t *testing.T) {
				cfg, fs := crashConfig(t)
				cfg.SnapshotChunkSize = 4096
				s, err := Open(cfg)
				if err != nil {
					t.Fatal(err)
				}
				prev := randomBytes(50_000, 1)
				prevID := writeSnapshot(t, s.Snapshots(2), 10, 1, prev)
				sink := startSnapshot(t, s.Snapshots(2), 20, 1, randomBytes(50_000, 2))
				if syncAfter {
					// A synced log write (in its own files) after the partial chunks.
					mustStore(t, s, []*raft.Log{{Index: 21, Term: 1}})
				}

				s = openStore(t, crash(t, s, fs, cfg, cc.cfg()))
				ss := s.Snapshots(2)
				if ids := listIDs(t, ss); len(ids) != 1 || ids[0] != prevID {
					t.Fatalf("List = %v, want [%s]", ids, prevID)
				}
				checkSnapshot(t, ss, prevID, prev)
				if c, want := countKeys(t, s, prefixSnapData), (len(prev)+4095)/4096; c != want {
					t.Fatalf("%d chunks stored, want %d (the partial snapshot's deleted)", c, want)
				}
				if _, _, err := ss.Open(sink.ID()); !errors.Is(err, ErrSnapshotNotFound) {
					t.Fatalf("Open(partial %s) = %v, want ErrSnapshotNotFound", sink.ID(), err)
				}
				if syncAfter {
					checkBounds(t, s, 21, 21)
				}
			})
		}
	}
}
