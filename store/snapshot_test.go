package store

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
)

var testConfiguration = raft.Configuration{Servers: []raft.Server{
	{Suffrage: raft.Voter, ID: "n1", Address: "127.0.0.1:7001"},
	{Suffrage: raft.Nonvoter, ID: "n2", Address: "127.0.0.1:7002"},
}}

// randomBytes returns n reproducible, incompressible bytes.
func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// writeSnapshot writes data as a snapshot in odd-sized pieces and closes the sink.
func writeSnapshot(t *testing.T, ss *SnapshotStore, index, term uint64, data []byte) string {
	t.Helper()
	sink := startSnapshot(t, ss, index, term, data)
	if err := sink.Close(); err != nil {
		t.Fatalf("sink Close: %v", err)
	}
	return sink.ID()
}

// startSnapshot creates a sink and writes data without closing it.
func startSnapshot(t *testing.T, ss *SnapshotStore, index, term uint64, data []byte) raft.SnapshotSink {
	t.Helper()
	sink, err := ss.Create(1, index, term, testConfiguration, index-1, nil)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	for p := data; len(p) > 0; {
		n := min(len(p), 12345)
		if w, err := sink.Write(p[:n]); err != nil || w != n {
			t.Fatalf("sink Write = %d, %v, want %d, nil", w, err, n)
		}
		p = p[n:]
	}
	return sink
}

// checkSnapshot opens id and compares its metadata and data.
func checkSnapshot(t *testing.T, ss *SnapshotStore, id string, want []byte) *raft.SnapshotMeta {
	t.Helper()
	meta, rc, err := ss.Open(id)
	if err != nil {
		t.Fatalf("Open(%s): %v", id, err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read snapshot %s: %v", id, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("snapshot %s: got %d bytes, want %d equal bytes", id, len(got), len(want))
	}
	if meta.ID != id || meta.Size != int64(len(want)) || meta.Version != 1 {
		t.Fatalf("meta = %+v, want ID %s, Size %d, Version 1", meta, id, len(want))
	}
	if diff := cmp.Diff(meta.Configuration, testConfiguration); diff != "" {
		t.Fatalf("meta.Configuration (-got +want):\n%s", diff)
	}
	return meta
}

func listIDs(t *testing.T, ss *SnapshotStore) []string {
	t.Helper()
	metas, err := ss.List()
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var ids []string
	for _, m := range metas {
		ids = append(ids, m.ID)
	}
	return ids
}

// countKeys counts the keys of one key family, to prove nothing is left behind.
func countKeys(t *testing.T, s *Store, prefix byte) int {
	t.Helper()
	lo, hi := s.keys.family(prefix)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSnapshotRoundTrip(t *testing.T) {
	const chunk = 64 << 10
	cases := []struct {
		name       string
		size       int
		wantChunks int
	}{
		{"empty", 0, 0},
		{"one byte", 1, 1},
		{"exactly one chunk", chunk, 1},
		{"one chunk and a byte", chunk + 1, 2},
		{"several chunks", 5*chunk + 777, 6},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.SnapshotChunkSize = chunk
			s := openStore(t, cfg)
			ss := s.Snapshots(2)
			data := randomBytes(tc.size, uint64(tc.size))
			id := writeSnapshot(t, ss, 42, 3, data)
			if ids := listIDs(t, ss); len(ids) != 1 || ids[0] != id {
				t.Fatalf("List = %v, want [%s]", ids, id)
			}
			meta := checkSnapshot(t, ss, id, data)
			if meta.Index != 42 || meta.Term != 3 || meta.ConfigurationIndex != 41 {
				t.Fatalf("meta = %+v, want Index 42, Term 3, ConfigurationIndex 41", meta)
			}
			if n := countKeys(t, s, prefixSnapData); n != tc.wantChunks {
				t.Fatalf("stored %d chunks, want %d", n, tc.wantChunks)
			}
			// Reading one byte at a time crosses every chunk boundary.
			_, rc, err := ss.Open(id)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			if err := iotest.TestReader(rc, data); err != nil {
				t.Fatalf("iotest.TestReader: %v", err)
			}
			if err := rc.Close(); err != nil {
				t.Fatalf("reader Close: %v", err)
			}
			if n, err := rc.Read(make([]byte, 1)); err == nil {
				t.Fatalf("Read after Close = %d, nil, want an error", n)
			}
		})
	}
}

func TestSnapshotRetain(t *testing.T) {
	cfg := testConfig(t)
	cfg.SnapshotChunkSize = 1000
	s := openStore(t, cfg)
	ss := s.Snapshots(2)
	var ids []string
	var data [][]byte
	for i := range uint64(4) {
		data = append(data, randomBytes(2500, i))
		ids = append(ids, writeSnapshot(t, ss, 10*(i+1), 1, data[i]))
	}
	if got, want := listIDs(t, ss), []string{ids[3], ids[2]}; !cmp.Equal(got, want) {
		t.Fatalf("List = %v, want %v (newest first)", got, want)
	}
	checkSnapshot(t, ss, ids[3], data[3])
	checkSnapshot(t, ss, ids[2], data[2])
	if _, _, err := ss.Open(ids[1]); !errors.Is(err, ErrSnapshotNotFound) {
		t.Fatalf("Open(deleted) = %v, want ErrSnapshotNotFound", err)
	}
	// 2 snapshots of 3 chunks each: nothing of the deleted ones is left.
	if m, c := countKeys(t, s, prefixSnapMeta), countKeys(t, s, prefixSnapData); m != 2 || c != 6 {
		t.Fatalf("stored %d metas and %d chunks, want 2 and 6", m, c)
	}
	if st := s.Stats(); st.Snapshots != 2 || st.LatestSnapshot != ids[3] {
		t.Fatalf("Stats = %+v, want 2 snapshots, latest %s", st, ids[3])
	}
}

// TestSnapshotOrder checks raft's ordering: term first, then index, then ID (time).
func TestSnapshotOrder(t *testing.T) {
	s := openStore(t, testConfig(t))
	ss := s.Snapshots(10)
	older := writeSnapshot(t, ss, 100, 1, []byte("a")) // higher index, lower term
	newer := writeSnapshot(t, ss, 50, 2, []byte("b"))
	same := writeSnapshot(t, ss, 50, 2, []byte("c")) // same term and index: later ID wins
	if same == newer {
		t.Fatalf("two snapshots got the same ID %s", same)
	}
	if got, want := listIDs(t, ss), []string{same, newer, older}; !cmp.Equal(got, want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
}

func TestSnapshotCancel(t *testing.T) {
	cfg := testConfig(t)
	cfg.SnapshotChunkSize = 1000
	s := openStore(t, cfg)
	ss := s.Snapshots(2)
	kept := writeSnapshot(t, ss, 5, 1, []byte("kept"))
	sink := startSnapshot(t, ss, 10, 1, randomBytes(5000, 1))
	if err := sink.Cancel(); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if err := sink.Close(); err != nil {
		t.Fatalf("Close after Cancel = %v, want nil", err)
	}
	if _, err := sink.Write([]byte("x")); err == nil {
		t.Fatal("Write after Cancel = nil, want an error")
	}
	if ids := listIDs(t, ss); !cmp.Equal(ids, []string{kept}) {
		t.Fatalf("List = %v, want [%s]", ids, kept)
	}
	if _, _, err := ss.Open(sink.ID()); !errors.Is(err, ErrSnapshotNotFound) {
		t.Fatalf("Open(canceled) = %v, want ErrSnapshotNotFound", err)
	}
	if c := countKeys(t, s, prefixSnapData); c != 1 {
		t.Fatalf("stored %d chunks, want 1 (the kept snapshot's)", c)
	}
}

func TestSnapshotCreateRejectsVersion(t *testing.T) {
	s := openStore(t, testConfig(t))
	if _, err := s.Snapshots(2).Create(0, 1, 1, raft.Configuration{}, 1, nil); err == nil {
		t.Fatal("Create(version 0) = nil error, want unsupported version")
	}
}

// TestSnapshotReaderOutlivesRetention reads a snapshot while newer ones push it out of the
// retained set: the reader keeps the view it opened (raft may be sending it to a follower).
func TestSnapshotReaderOutlivesRetention(t *testing.T) {
	cfg := testConfig(t)
	cfg.SnapshotChunkSize = 1000
	s := openStore(t, cfg)
	ss := s.Snapshots(1)
	data := randomBytes(10_000, 7)
	id := writeSnapshot(t, ss, 1, 1, data)
	_, rc, err := ss.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	first := make([]byte, 1500)
	if _, err := io.ReadFull(rc, first); err != nil {
		t.Fatal(err)
	}
	writeSnapshot(t, ss, 2, 1, []byte("newer"))
	if ids := listIDs(t, ss); len(ids) != 1 || ids[0] == id {
		t.Fatalf("List = %v, want only the newer snapshot", ids)
	}
	rest, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read after retention deleted the snapshot: %v", err)
	}
	if !bytes.Equal(append(first, rest...), data) {
		t.Fatal("snapshot read after retention differs")
	}
	if st := s.Stats(); st.OpenSnapshotReaders != 1 {
		t.Fatalf("Stats.OpenSnapshotReaders = %d, want 1", st.OpenSnapshotReaders)
	}
}
