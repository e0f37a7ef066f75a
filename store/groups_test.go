package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
)

// openGroups opens groups stores over cfg and closes them when the test ends.
func openGroups(t *testing.T, cfg Config, groups int) *Groups {
	t.Helper()
	gs, err := OpenGroups(cfg, groups)
	if err != nil {
		t.Fatalf("OpenGroups(%d): %v", groups, err)
	}
	t.Cleanup(func() {
		if err := gs.Close(); err != nil {
			t.Errorf("Groups.Close: %v", err)
		}
	})
	return gs
}

func closeGroups(t *testing.T, gs *Groups) {
	t.Helper()
	if err := gs.Close(); err != nil {
		t.Fatalf("Groups.Close: %v", err)
	}
}

// dbContents returns every key and value in pebble.
func dbContents(t *testing.T, db *pebble.DB) map[string]string {
	t.Helper()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		m[string(it.Key())] = string(it.Value())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return m
}

// checkStable checks that key holds want in s, or is missing if want is "".
func checkStable(t *testing.T, s *Store, key, want string) {
	t.Helper()
	got, err := s.Get([]byte(key))
	switch {
	case want == "" && !errors.Is(err, ErrKeyNotFound):
		t.Fatalf("Get(%s) = %q, %v, want ErrKeyNotFound", key, got, err)
	case want != "" && (err != nil || string(got) != want):
		t.Fatalf("Get(%s) = %q, %v, want %q, nil", key, got, err, want)
	}
}

func TestOpenGroupsBounds(t *testing.T) {
	for _, groups := range []int{-1, 0, MaxGroups + 1} {
		t.Run(fmt.Sprintf("refuses %d", groups), func(t *testing.T) {
			gs, err := OpenGroups(testConfig(t), groups)
			if err == nil {
				gs.Close()
				t.Fatalf("OpenGroups(%d) = nil error, want one", groups)
			}
			if !strings.Contains(err.Error(), "groups must be in [1, 1024]") {
				t.Fatalf("OpenGroups(%d) = %v, want an error naming the range", groups, err)
			}
		})
	}
	for _, groups := range []int{1, MaxGroups} {
		t.Run(fmt.Sprintf("opens %d", groups), func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Dir, cfg.FS, cfg.SegmentSize = "db", vfs.NewMem(), 1024
			gs := openGroups(t, cfg, groups)
			if gs.Len() != groups {
				t.Fatalf("Len = %d, want %d", gs.Len(), groups)
			}
			last := gs.Store(groups - 1)
			mustStore(t, last, makeLogs(1, 3, 1))
			checkLogs(t, last, makeLogs(1, 3, 1))
		})
	}
}

// TestGroupsIndependent: the same indexes and stable keys in each group, then deletes in one
// group: each group sees its own entries and values, before and after a reopen.
func TestGroupsIndependent(t *testing.T) {
	cfg := smallSegments(t)
	gs := openGroups(t, cfg, 3)
	for g := range 3 {
		s := gs.Store(g)
		mustStore(t, s, makeLogs(1, 100, uint64(g+1))) // term g+1: each group's payloads differ
		if err := s.SetUint64([]byte("CurrentTerm"), uint64(g+1)); err != nil {
			t.Fatal(err)
		}
		if err := s.Set([]byte("LastVoteCand"), fmt.Appendf(nil, "n%d", g)); err != nil {
			t.Fatal(err)
		}
	}
	mustStore(t, gs.Store(0), makeLogs(101, 110, 1))
	mustDelete(t, gs.Store(1), 1, 40)   // compaction: raises group 1's floor only
	mustDelete(t, gs.Store(1), 91, 100) // conflict
	if err := gs.Store(2).Set([]byte("only-in-2"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	for g, want := range []uint64{2, 1, 1} {
		if got := gs.Store(g).Stats().SyncLatency.Count(); got != want {
			t.Errorf("group %d SyncLatency.Count = %d, want %d (its own StoreLogs)", g, got, want)
		}
	}

	check := func(t *testing.T, gs *Groups) {
		t.Helper()
		s0, s1, s2 := gs.Store(0), gs.Store(1), gs.Store(2)
		checkBounds(t, s0, 1, 110)
		checkLogs(t, s0, makeLogs(1, 110, 1))
		checkBounds(t, s1, 41, 90)
		checkLogs(t, s1, makeLogs(41, 90, 2))
		checkMissing(t, s1, 40, 91)
		checkBounds(t, s2, 1, 100)
		checkLogs(t, s2, makeLogs(1, 100, 3))
		for g := range 3 {
			s := gs.Store(g)
			if term, err := s.GetUint64([]byte("CurrentTerm")); err != nil || term != uint64(g+1) {
				t.Fatalf("group %d GetUint64(CurrentTerm) = %d, %v, want %d, nil", g, term, err, g+1)
			}
			checkStable(t, s, "LastVoteCand", fmt.Sprintf("n%d", g))
		}
		checkStable(t, s0, "only-in-2", "")
		checkStable(t, s1, "only-in-2", "")
		checkStable(t, s2, "only-in-2", "x")
	}
	check(t, gs)
	closeGroups(t, gs)
	check(t, openGroups(t, cfg, 3))
}

// TestGroupsSnapshotsIndependent: each group lists, opens, retains and reaps only its own
// snapshots, also when their IDs are the same.
func TestGroupsSnapshotsIndependent(t *testing.T) {
	cfg := testConfig(t)
	cfg.SnapshotChunkSize = 1000
	gs := openGroups(t, cfg, 3)
	ss0, ss1, ss2 := gs.Store(0).Snapshots(1), gs.Store(1).Snapshots(1), gs.Store(2).Snapshots(1)
	data0, data1 := randomBytes(2500, 1), randomBytes(3500, 2)
	id0 := writeSnapshot(t, ss0, 10, 1, data0)
	old1 := writeSnapshot(t, ss1, 10, 1, randomBytes(2500, 3))
	id1 := writeSnapshot(t, ss1, 20, 1, data1) // retention deletes old1 from group 1 only

	if got := listIDs(t, ss0); !cmp.Equal(got, []string{id0}) {
		t.Fatalf("group 0 List = %v, want [%s]", got, id0)
	}
	if got := listIDs(t, ss1); !cmp.Equal(got, []string{id1}) {
		t.Fatalf("group 1 List = %v, want [%s]", got, id1)
	}
	if got := listIDs(t, ss2); len(got) != 0 {
		t.Fatalf("group 2 List = %v, want none", got)
	}
	checkSnapshot(t, ss0, id0, data0)
	checkSnapshot(t, ss1, id1, data1)
	for _, id := range []string{id0, id1, old1} {
		if _, _, err := ss2.Open(id); !errors.Is(err, ErrSnapshotNotFound) {
			t.Fatalf("group 2 Open(%s) = %v, want ErrSnapshotNotFound", id, err)
		}
	}
	if old1 != id0 { // the same ID in group 0 is a different snapshot, and must stay
		if _, _, err := ss0.Open(old1); !errors.Is(err, ErrSnapshotNotFound) {
			t.Fatalf("group 0 Open(group 1's %s) = %v, want ErrSnapshotNotFound", old1, err)
		}
	}
	if _, _, err := ss1.Open(old1); !errors.Is(err, ErrSnapshotNotFound) {
		t.Fatalf("group 1 Open(reaped %s) = %v, want ErrSnapshotNotFound", old1, err)
	}

	// A sink left unclosed in group 2 is reaped at the next open, and only its chunks.
	startSnapshot(t, ss2, 30, 1, randomBytes(5000, 4))
	if c := countKeys(t, gs.Store(2), prefixSnapData); c != 5 {
		t.Fatalf("group 2 holds %d chunks before the reopen, want 5", c)
	}
	closeGroups(t, gs)
	gs = openGroups(t, cfg, 3)
	for g, want := range []int{3, 4, 0} {
		if c := countKeys(t, gs.Store(g), prefixSnapData); c != want {
			t.Errorf("group %d holds %d chunks, want %d", g, c, want)
		}
	}
	checkSnapshot(t, gs.Store(0).Snapshots(1), id0, data0)
	checkSnapshot(t, gs.Store(1).Snapshots(1), id1, data1)
	for g, want := range []string{id0, id1, ""} {
		if st := gs.Store(g).Stats(); st.LatestSnapshot != want {
			t.Errorf("group %d Stats.LatestSnapshot = %q, want %q", g, st.LatestSnapshot, want)
		}
	}
}

// TestOpenWrittenStoreIsGroupZero: a store Open wrote opens as group 0 of OpenGroups with its
// pebble keys and log files untouched; the other groups start empty under their own prefix
// and log directory, and once they exist, opening fewer groups is refused.
func TestOpenWrittenStoreIsGroupZero(t *testing.T) {
	cfg := smallSegments(t)
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logs := makeLogs(1, 100, 3)
	mustStore(t, s, logs)
	mustDelete(t, s, 1, 10)
	if err := s.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	data := randomBytes(10_000, 1)
	snapID := writeSnapshot(t, s.Snapshots(2), 90, 3, data)
	before := dbContents(t, s.db)
	segs := segmentFiles(t, cfg)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	gs := openGroups(t, cfg, 3)
	g0 := gs.Store(0)
	checkBounds(t, g0, 11, 100)
	checkLogs(t, g0, logs[10:])
	if term, err := g0.GetUint64([]byte("CurrentTerm")); err != nil || term != 3 {
		t.Fatalf("GetUint64(CurrentTerm) = %d, %v, want 3, nil", term, err)
	}
	checkSnapshot(t, g0.Snapshots(2), snapID, data)
	if got := segmentFiles(t, cfg); !cmp.Equal(got, segs) {
		t.Fatalf("group 0's segments = %v, want Open's %v", got, segs)
	}
	for g := 1; g < 3; g++ {
		s := gs.Store(g)
		checkBounds(t, s, 0, 0)
		checkStable(t, s, "CurrentTerm", "")
		if ids := listIDs(t, s.Snapshots(2)); len(ids) != 0 {
			t.Fatalf("group %d List = %v, want none", g, ids)
		}
		mustStore(t, s, makeLogs(1, 5, uint64(g)))
	}

	// Every key is group 0's exactly as Open left it, or under a group's prefix.
	group0 := map[string]string{}
	for k, v := range dbContents(t, gs.db) {
		if k[0] != prefixGroup {
			group0[k] = v
			continue
		}
		if g := binary.BigEndian.Uint16([]byte(k[1:])); g < 1 || g > 2 || !strings.ContainsRune("fsmdl", rune(k[3])) {
			t.Errorf("key %x: not group 1's or 2's, or no family", k)
		}
	}
	if diff := cmp.Diff(group0, before); diff != "" {
		t.Errorf("group 0's pebble keys changed (-got +want):\n%s", diff)
	}
	names, err := vfs.Default.List(cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"raftlog", "raftlog-g1", "raftlog-g2"} {
		if !slices.Contains(names, dir) {
			t.Errorf("%s has %v, want the log directory %s", cfg.Dir, names, dir)
		}
	}
	closeGroups(t, gs)

	if s, err := Open(cfg); err == nil || !strings.Contains(err.Error(), "holds group 1") {
		if err == nil {
			s.Close()
		}
		t.Fatalf("Open of a 3-group store = %v, want it refused for holding group 1", err)
	}
	if gs, err := OpenGroups(cfg, 2); err == nil || !strings.Contains(err.Error(), "holds group 2") {
		if err == nil {
			gs.Close()
		}
		t.Fatalf("OpenGroups(2) of a 3-group store = %v, want it refused for holding group 2", err)
	}
	gs = openGroups(t, cfg, 3)
	checkLogs(t, gs.Store(0), logs[10:])
	checkLogs(t, gs.Store(2), makeLogs(1, 5, 2))
}

// TestGroupStoreClose: closing one group's store closes its readers and leaves pebble to the
// other groups; Groups.Close closes the rest, once.
func TestGroupStoreClose(t *testing.T) {
	cfg := testConfig(t)
	cfg.SnapshotChunkSize = 1000
	gs, err := OpenGroups(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	s0, s1, s2 := gs.Store(0), gs.Store(1), gs.Store(2)
	data := randomBytes(5000, 1)
	var readers []io.ReadCloser
	for _, s := range []*Store{s0, s1} {
		mustStore(t, s, makeLogs(1, 3, 1))
		ss := s.Snapshots(2)
		_, rc, err := ss.Open(writeSnapshot(t, ss, 3, 1, data))
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, rc)
	}

	if err := s1.Close(); err != nil {
		t.Fatalf("group 1 Close: %v", err)
	}
	var l raft.Log
	if err := s1.GetLog(1, &l); !errors.Is(err, ErrClosed) {
		t.Fatalf("group 1 GetLog after its Close = %v, want ErrClosed", err)
	}
	if err := s1.Set([]byte("k"), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("group 1 Set after its Close = %v, want ErrClosed", err)
	}
	if _, err := readers[1].Read(make([]byte, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("group 1 reader after its Close = %v, want ErrClosed", err)
	}
	if got, err := io.ReadAll(readers[0]); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("group 0 reader after group 1's Close: %d bytes, %v, want %d bytes", len(got), err, len(data))
	}
	for _, s := range []*Store{s0, s2} {
		mustStore(t, s, makeLogs(4, 6, 1))
		if err := s.Set([]byte("k"), []byte("v")); err != nil {
			t.Fatalf("Set after group 1's Close: %v", err)
		}
		checkStable(t, s, "k", "v")
		ss := s.Snapshots(2)
		checkSnapshot(t, ss, writeSnapshot(t, ss, 6, 1, data), data)
	}

	if err := gs.Close(); err != nil {
		t.Fatalf("Groups.Close: %v", err)
	}
	if err := gs.Close(); err != nil {
		t.Fatalf("second Groups.Close = %v, want nil", err)
	}
	if err := s0.StoreLogs(makeLogs(7, 7, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("StoreLogs after Groups.Close = %v, want ErrClosed", err)
	}
	if _, err := s2.Get([]byte("k")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Groups.Close = %v, want ErrClosed", err)
	}
	if err := readers[0].Close(); err != nil {
		t.Fatalf("reader Close after Groups.Close = %v, want nil", err)
	}
}

// TestGroupsLogAttribute: the log lines of group g > 0 say which group; group 0's do not, as
// before groups.
func TestGroupsLogAttribute(t *testing.T) {
	var buf bytes.Buffer
	cfg := testConfig(t)
	cfg.Logger = slog.New(slog.NewJSONHandler(&buf, nil))
	gs, err := OpenGroups(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	closeGroups(t, gs) // pebble's goroutines are done with buf

	var opened []any
	for line := range bytes.Lines(buf.Bytes()) {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == "store opened" {
			opened = append(opened, rec["group"])
		}
	}
	if want := []any{nil, 1.0, 2.0}; !cmp.Equal(opened, want) {
		t.Fatalf("\"store opened\" group attributes = %v, want %v", opened, want)
	}
}

// TestCrashGroups: power loss while three groups write over one pebble: each group's
// acknowledged log, stable values and snapshots are there, and only a group's own partial
// snapshot is reaped.
func TestCrashGroups(t *testing.T) {
	for _, cc := range crashCases {
		t.Run(cc.name, func(t *testing.T) {
			cfg, fs := crashConfig(t)
			cfg.SnapshotChunkSize = 4096
			gs, err := OpenGroups(cfg, 3)
			if err != nil {
				t.Fatal(err)
			}
			for g := range 3 {
				s := gs.Store(g)
				logs := makeLogs(1, 150, uint64(g+1))
				for i := 0; i < len(logs); i += 7 {
					mustStore(t, s, logs[i:min(i+7, len(logs))])
				}
				if err := s.SetUint64([]byte("CurrentTerm"), uint64(g+1)); err != nil {
					t.Fatal(err)
				}
			}
			mustDelete(t, gs.Store(1), 1, 50)
			mustDelete(t, gs.Store(2), 121, 150)
			snap0, snap1 := randomBytes(20_000, 1), randomBytes(30_000, 2)
			id0 := writeSnapshot(t, gs.Store(0).Snapshots(2), 100, 1, snap0)
			id1 := writeSnapshot(t, gs.Store(1).Snapshots(2), 100, 2, snap1)
			partial := startSnapshot(t, gs.Store(1).Snapshots(2), 140, 2, randomBytes(50_000, 3))

			crashed := fs.CrashClone(cc.cfg())
			closeGroups(t, gs)
			cfg.FS = crashed
			gs = openGroups(t, cfg, 3)

			s0, s1, s2 := gs.Store(0), gs.Store(1), gs.Store(2)
			checkBounds(t, s0, 1, 150)
			checkLogs(t, s0, makeLogs(1, 150, 1))
			checkBounds(t, s1, 51, 150)
			checkLogs(t, s1, makeLogs(51, 150, 2))
			checkBounds(t, s2, 1, 120)
			checkLogs(t, s2, makeLogs(1, 120, 3))
			for g := range 3 {
				if term, err := gs.Store(g).GetUint64([]byte("CurrentTerm")); err != nil || term != uint64(g+1) {
					t.Fatalf("group %d GetUint64(CurrentTerm) = %d, %v, want %d, nil", g, term, err, g+1)
				}
			}
			checkSnapshot(t, s0.Snapshots(2), id0, snap0)
			checkSnapshot(t, s1.Snapshots(2), id1, snap1)
			if ids := listIDs(t, s1.Snapshots(2)); !cmp.Equal(ids, []string{id1}) {
				t.Fatalf("group 1 List = %v, want [%s]", ids, id1)
			}
			if _, _, err := s1.Snapshots(2).Open(partial.ID()); !errors.Is(err, ErrSnapshotNotFound) {
				t.Fatalf("group 1 Open(partial) = %v, want ErrSnapshotNotFound", err)
			}
			for g, want := range []int{5, 8, 0} { // 20 000 and 30 000 bytes in 4096-byte chunks
				if c := countKeys(t, gs.Store(g), prefixSnapData); c != want {
					t.Errorf("group %d holds %d chunks, want %d", g, c, want)
				}
			}
		})
	}
}

// TestRaftGroups runs two single-node rafts on two groups of one store, snapshots both and
// restarts them on the reopened store: each restores its own state.
func TestRaftGroups(t *testing.T) {
	cfg := testConfig(t)
	cfg.SnapshotChunkSize = 16 << 10
	gs, err := OpenGroups(cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := make([][]byte, 2)
	for g := range 2 {
		r, stop := startRaft(t, gs.Store(g), &appendFSM{})
		for i := range 20 {
			cmd := fmt.Appendf(nil, "g%d-%04d:%s|", g, i, bytes.Repeat([]byte{'x'}, 2000))
			apply(t, r, cmd)
			want[g] = append(want[g], cmd...)
		}
		if err := r.Snapshot().Error(); err != nil {
			t.Fatalf("group %d Snapshot: %v", g, err)
		}
		stop()
	}
	closeGroups(t, gs)

	gs = openGroups(t, cfg, 2)
	for g := range 2 {
		fsm := &appendFSM{}
		r, stop := startRaft(t, gs.Store(g), fsm)
		apply(t, r, []byte("after-restart|"))
		stop()
		got, restored := fsm.snapshot()
		if w := append(want[g], "after-restart|"...); !restored || !bytes.Equal(got, w) {
			t.Fatalf("group %d: restored %v, state %d bytes, want restored, %d equal bytes",
				g, restored, len(got), len(w))
		}
	}
}
