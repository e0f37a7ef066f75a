package store

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/hashicorp/raft"
	"go.uber.org/goleak"
)

// Pebble (compactions, cleaners, disk health checks) and raft start goroutines; every one
// must be gone once the store and raft are closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testConfig is a config on a fresh temp dir with logs discarded.
func testConfig(t *testing.T) Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.Logger = slog.New(slog.DiscardHandler)
	return cfg
}

// openStore opens cfg and closes the store when the test ends.
func openStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// logCmp compares logs as raft does: an empty Data or Extensions is the same as nil (the
// pebble store decodes empty as nil; the inmem store hands back what it was given), and
// AppendedAt by instant (cmp uses time.Time.Equal).
var logCmp = cmpopts.EquateEmpty()

// makeLogs returns entries lo..hi of the given term with distinct payloads.
func makeLogs(lo, hi, term uint64) []*raft.Log {
	var logs []*raft.Log
	for i := lo; i <= hi; i++ {
		logs = append(logs, &raft.Log{
			Index: i, Term: term, Type: raft.LogCommand,
			Data:       fmt.Appendf(nil, "cmd-%d-%d", term, i),
			AppendedAt: time.Unix(1_700_000_000, int64(i)),
		})
	}
	return logs
}

type raftStores interface {
	raft.LogStore
	raft.StableStore
}

func checkBounds(t *testing.T, s raft.LogStore, wantFirst, wantLast uint64) {
	t.Helper()
	first, err := s.FirstIndex()
	if err != nil {
		t.Fatalf("FirstIndex: %v", err)
	}
	last, err := s.LastIndex()
	if err != nil {
		t.Fatalf("LastIndex: %v", err)
	}
	if first != wantFirst || last != wantLast {
		t.Fatalf("bounds = [%d, %d], want [%d, %d]", first, last, wantFirst, wantLast)
	}
}

func checkLogs(t *testing.T, s raft.LogStore, want []*raft.Log) {
	t.Helper()
	for _, w := range want {
		var got raft.Log
		if err := s.GetLog(w.Index, &got); err != nil {
			t.Fatalf("GetLog(%d): %v", w.Index, err)
		}
		if diff := cmp.Diff(&got, w, logCmp); diff != "" {
			t.Fatalf("GetLog(%d) (-got +want):\n%s", w.Index, diff)
		}
	}
}

func checkMissing(t *testing.T, s raft.LogStore, indexes ...uint64) {
	t.Helper()
	for _, i := range indexes {
		var got raft.Log
		if err := s.GetLog(i, &got); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("GetLog(%d) = %v, want raft.ErrLogNotFound", i, err)
		}
	}
}

func mustStore(t *testing.T, s raft.LogStore, logs []*raft.Log) {
	t.Helper()
	if err := s.StoreLogs(logs); err != nil {
		t.Fatalf("StoreLogs: %v", err)
	}
}

func mustDelete(t *testing.T, s raft.LogStore, lo, hi uint64) {
	t.Helper()
	if err := s.DeleteRange(lo, hi); err != nil {
		t.Fatalf("DeleteRange(%d, %d): %v", lo, hi, err)
	}
}

// TestContract runs one table against raft's InmemStore (the reference raft is tested
// with) and the pebble Store, so they cannot drift apart where raft cares.
func TestContract(t *testing.T) {
	impls := []struct {
		name string
		open func(t *testing.T) raftStores
	}{
		{"inmem", func(*testing.T) raftStores { return raft.NewInmemStore() }},
		{"pebble", func(t *testing.T) raftStores { return openStore(t, testConfig(t)) }},
		{"pebble group 1 of 3", func(t *testing.T) raftStores {
			return openGroups(t, testConfig(t), 3).Store(1)
		}},
	}
	cases := []struct {
		name string
		run  func(t *testing.T, s raftStores)
	}{
		{"empty", func(t *testing.T, s raftStores) {
			checkBounds(t, s, 0, 0)
			checkMissing(t, s, 0, 1, 2)
		}},
		{"store and get", func(t *testing.T, s raftStores) {
			logs := makeLogs(1, 10, 1)
			mustStore(t, s, logs[:3])
			checkBounds(t, s, 1, 3)
			if err := s.StoreLog(logs[3]); err != nil {
				t.Fatalf("StoreLog: %v", err)
			}
			mustStore(t, s, logs[4:])
			checkBounds(t, s, 1, 10)
			checkLogs(t, s, logs)
			checkMissing(t, s, 0, 11)
		}},
		{"empty batch", func(t *testing.T, s raftStores) {
			mustStore(t, s, nil)
			checkBounds(t, s, 0, 0)
		}},
		{"every field round-trips", func(t *testing.T, s raftStores) {
			now := time.Now() // with a monotonic reading and a location, both dropped
			logs := []*raft.Log{
				{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte{0, 1, 2}},
				{Index: 2, Term: 1 << 40, Type: raft.LogCommand, Data: []byte("set k v"),
					Extensions: []byte("ext\x00ension"), AppendedAt: now},
				{Index: 3, Term: 1 << 40, Type: raft.LogNoop, AppendedAt: time.Unix(-5, 999)},
				{Index: 4, Term: 1<<64 - 1, Type: raft.LogBarrier,
					Data: bytes.Repeat([]byte{0xff}, 10_000), Extensions: []byte{},
					AppendedAt: time.Date(2262, 1, 1, 0, 0, 0, 1, time.UTC)},
				{Index: 5, Term: 7, Type: raft.LogAddPeerDeprecated},
			}
			mustStore(t, s, logs)
			checkLogs(t, s, logs)
		}},
		{"delete head", func(t *testing.T, s raftStores) {
			logs := makeLogs(1, 10, 1)
			mustStore(t, s, logs)
			mustDelete(t, s, 1, 5)
			checkBounds(t, s, 6, 10)
			checkMissing(t, s, 1, 5)
			checkLogs(t, s, logs[5:])
		}},
		{"delete tail then re-append", func(t *testing.T, s raftStores) {
			mustStore(t, s, makeLogs(1, 10, 1))
			mustDelete(t, s, 8, 10)
			checkBounds(t, s, 1, 7)
			checkMissing(t, s, 8, 10)
			newer := makeLogs(8, 9, 2)
			mustStore(t, s, newer)
			checkBounds(t, s, 1, 9)
			checkLogs(t, s, newer)
			checkLogs(t, s, makeLogs(1, 7, 1))
			checkMissing(t, s, 10)
		}},
		{"delete everything then append", func(t *testing.T, s raftStores) {
			mustStore(t, s, makeLogs(1, 10, 1))
			mustDelete(t, s, 1, 10)
			checkBounds(t, s, 0, 0)
			mustStore(t, s, makeLogs(11, 12, 2))
			checkBounds(t, s, 11, 12)
		}},
		{"stable Set and Get", func(t *testing.T, s raftStores) {
			for _, v := range []string{"first", "second"} {
				if err := s.Set([]byte("LastVoteCand"), []byte(v)); err != nil {
					t.Fatalf("Set: %v", err)
				}
				got, err := s.Get([]byte("LastVoteCand"))
				if err != nil || string(got) != v {
					t.Fatalf("Get = %q, %v, want %q, nil", got, err, v)
				}
			}
		}},
		{"stable SetUint64 and GetUint64", func(t *testing.T, s raftStores) {
			for _, v := range []uint64{0, 1, 1<<64 - 1} {
				if err := s.SetUint64([]byte("CurrentTerm"), v); err != nil {
					t.Fatalf("SetUint64: %v", err)
				}
				got, err := s.GetUint64([]byte("CurrentTerm"))
				if err != nil || got != v {
					t.Fatalf("GetUint64 = %d, %v, want %d, nil", got, err, v)
				}
			}
		}},
		{"stable missing key is exactly not found", func(t *testing.T, s raftStores) {
			got, err := s.Get([]byte("missing"))
			// raft compares err.Error() == "not found" (api.go, raft.go).
			if err == nil || err.Error() != "not found" || got != nil {
				t.Fatalf("Get(missing) = %q, %v, want nil, \"not found\"", got, err)
			}
		}},
		{"stable missing uint64 is 0", func(t *testing.T, s raftStores) {
			// Here the two differ in a way raft does not care about: InmemStore returns
			// 0, nil; the pebble store returns 0, "not found" like raft-boltdb. Every
			// raft caller accepts both (it ignores "not found" and uses the 0).
			got, err := s.GetUint64([]byte("missing"))
			if got != 0 || (err != nil && err.Error() != "not found") {
				t.Fatalf("GetUint64(missing) = %d, %v, want 0 and nil or \"not found\"", got, err)
			}
		}},
	}
	for _, impl := range impls {
		for _, tc := range cases {
			t.Run(impl.name+"/"+tc.name, func(t *testing.T) {
				tc.run(t, impl.open(t))
			})
		}
	}
}

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.Dir = "x"
	cases := []struct {
		name    string
		mutate  func(c *Config)
		wantErr string // "" = valid
	}{
		{"default with dir", func(*Config) {}, ""},
		{"zero values are defaults", func(c *Config) { *c = Config{Dir: "x"} }, ""},
		{"no dir", func(c *Config) { c.Dir = "" }, "Dir"},
		{"negative cache", func(c *Config) { c.CacheSize = -1 }, "CacheSize"},
		{"huge memtable", func(c *Config) { c.MemTableSize = 2 << 30 }, "MemTableSize"},
		{"negative chunk", func(c *Config) { c.SnapshotChunkSize = -1 }, "SnapshotChunkSize"},
		{"huge chunk", func(c *Config) { c.SnapshotChunkSize = 1 << 30 }, "SnapshotChunkSize"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			err := c.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.wantErr))):
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.wantErr)
			}
		})
	}
}

// TestPersistence writes everything a node keeps, closes, reopens and finds it all,
// including the cached log bounds.
func TestPersistence(t *testing.T) {
	cfg := testConfig(t)
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	logs := makeLogs(1, 100, 3)
	mustStore(t, s, logs)
	mustDelete(t, s, 1, 10)   // compaction
	mustDelete(t, s, 91, 100) // conflict
	if err := s.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("snapshot"), 1000)
	snapID := writeSnapshot(t, s.Snapshots(2), 90, 3, data)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}

	s = openStore(t, cfg)
	checkBounds(t, s, 11, 90)
	checkLogs(t, s, logs[10:90])
	checkMissing(t, s, 10, 91)
	if term, err := s.GetUint64([]byte("CurrentTerm")); err != nil || term != 3 {
		t.Fatalf("GetUint64(CurrentTerm) = %d, %v, want 3, nil", term, err)
	}
	if cand, err := s.Get([]byte("LastVoteCand")); err != nil || string(cand) != "n2" {
		t.Fatalf("Get(LastVoteCand) = %q, %v, want n2, nil", cand, err)
	}
	checkSnapshot(t, s.Snapshots(2), snapID, data)

	st := s.Stats()
	want := Stats{FirstIndex: 11, LastIndex: 90, LogEntries: 80, Snapshots: 1, LatestSnapshot: snapID}
	if diff := cmp.Diff(st, want, cmpopts.IgnoreFields(Stats{}, "LogBytes", "DiskBytes", "SyncLatency")); diff != "" {
		t.Errorf("Stats (-got +want):\n%s", diff)
	}
	if st.DiskBytes == 0 {
		t.Errorf("Stats.DiskBytes = 0, want > 0")
	}
}

// TestClosed checks that every method fails cleanly after Close instead of reaching into a
// closed pebble (which panics).
func TestClosed(t *testing.T) {
	s, err := Open(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	mustStore(t, s, makeLogs(1, 3, 1))
	ss := s.Snapshots(2)
	id := writeSnapshot(t, ss, 3, 1, []byte("data"))
	_, rc, err := ss.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // also closes the forgotten reader
		t.Fatalf("Close: %v", err)
	}
	var l raft.Log
	_, getErr := s.Get([]byte("k"))
	_, createErr := ss.Create(1, 4, 1, raft.Configuration{}, 1, nil)
	_, _, openErr := ss.Open(id)
	_, listErr := ss.List()
	_, readErr := rc.Read(make([]byte, 10))
	for name, err := range map[string]error{
		"GetLog":      s.GetLog(1, &l),
		"StoreLogs":   s.StoreLogs(makeLogs(4, 4, 1)),
		"DeleteRange": s.DeleteRange(1, 2),
		"Set":         s.Set([]byte("k"), nil),
		"Get":         getErr,
		"Create":      createErr,
		"Open":        openErr,
		"List":        listErr,
		"Read":        readErr,
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	if err := rc.Close(); err != nil {
		t.Errorf("reader Close after store Close = %v, want nil", err)
	}
	if st := s.Stats(); !st.Closed || st.LastIndex != 3 {
		t.Errorf("Stats after Close = %+v, want Closed and LastIndex 3", st)
	}
}

// TestGetLogOwnsMemory checks GetLog copies out of pebble: the returned slices must stay
// intact after pebble reuses its buffers (more reads, writes, a flush and compaction).
func TestGetLogOwnsMemory(t *testing.T) {
	s := openStore(t, testConfig(t))
	logs := makeLogs(1, 200, 1)
	mustStore(t, s, logs)
	got := make([]raft.Log, len(logs))
	for i := range logs {
		if err := s.GetLog(logs[i].Index, &got[i]); err != nil {
			t.Fatal(err)
		}
	}
	mustStore(t, s, makeLogs(201, 2000, 1))
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	mustDelete(t, s, 1, 1000)
	for i := range logs {
		if diff := cmp.Diff(&got[i], logs[i], logCmp); diff != "" {
			t.Fatalf("log %d changed under us (-got +want):\n%s", i+1, diff)
		}
	}
	// Appending to Data must not overwrite Extensions (they share one copy).
	l := raft.Log{}
	mustStore(t, s, []*raft.Log{{Index: 2001, Term: 1, Data: []byte("d"), Extensions: []byte("e")}})
	if err := s.GetLog(2001, &l); err != nil {
		t.Fatal(err)
	}
	_ = append(l.Data, 'X')
	if string(l.Extensions) != "e" {
		t.Fatalf("Extensions = %q after appending to Data, want %q", l.Extensions, "e")
	}
}

func TestDecodeLogRejectsGarbage(t *testing.T) {
	good := appendLog(nil, &raft.Log{Term: 1, Data: []byte("abc"), AppendedAt: time.Unix(1, 2)})
	cases := []struct {
		name string
		val  []byte
	}{
		{"empty", nil},
		{"unknown version", append([]byte{9}, good[1:]...)},
		{"truncated", good[:len(good)-1]},
		{"trailing bytes", append(append([]byte(nil), good...), 0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var l raft.Log
			if err := decodeLog(tc.val, &l); err == nil {
				t.Fatalf("decodeLog(%x) = nil, want an error", tc.val)
			}
		})
	}
}

// TestCustomFS checks Config.FS is used (the crash tests depend on it).
func TestCustomFS(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(t)
	cfg.Dir, cfg.FS = "db", fs
	s := openStore(t, cfg)
	mustStore(t, s, makeLogs(1, 1, 1))
	if names, err := fs.List("db"); err != nil || len(names) == 0 {
		t.Fatalf("memfs List(db) = %v, %v, want pebble's files", names, err)
	}
}

// TestSyncLatency checks that every StoreLogs call (one synced commit) is timed once.
func TestSyncLatency(t *testing.T) {
	s := openStore(t, testConfig(t))
	for i := uint64(0); i < 5; i++ {
		mustStore(t, s, makeLogs(1+10*i, 10*i+10, 1))
	}
	sync := s.Stats().SyncLatency
	if got := sync.Count(); got != 5 {
		t.Errorf("SyncLatency.Count = %d, want 5 (one per StoreLogs)", got)
	}
	if sync.Sum == 0 {
		t.Errorf("SyncLatency.Sum = 0, want the commits' time")
	}
}
