package fsm_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/google/go-cmp/cmp"
	"hash/crc32"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/raftlock/raftlock/fsm"
)

// maxSnapshotField mirrors the limit in snapshot.go.
const maxSnapshotField = 64 << 20

// sampleMachine builds a small table with binary keys, an empty owner, a renewed lease, a lock
// without a lease and fields at their maximum.
func sampleMachine(t *testing.T) *fsm.Machine {
	t.Helper()
	m := fsm.New()
	next := applyAll(t, m, 1, []fsm.Command{
		grant("b", "owner-b", 1000, matchAny),
		grant("a\x00\r\n", "", 0, matchAbsent),
		grant("c", "owner-c", math.MaxUint64, matchAny),
		renew("b", byToken(1), 5000),
		grant("gone", "x", 10, matchAny),
		release("gone", byOwner("x")),
		grant("\x00", "\xff\x00", 1, matchAny),
	})
	m.Advance(next + 10)
	return m
}

func TestSnapshotEmpty(t *testing.T) {
	for _, applied := range []uint64{0, 1, 42, math.MaxUint64} {
		t.Run(fmt.Sprint(applied), func(t *testing.T) {
			m := fsm.New()
			m.Advance(applied)
			s := m.Snapshot()
			if got := s.Len(); got != 0 {
				t.Errorf("Snapshot().Len() = %d, want 0", got)
			}
			b := writeSnapshot(t, s)
			r := restore(t, b)
			if got := r.Len(); got != 0 {
				t.Errorf("restored Len() = %d, want 0", got)
			}
			if got := r.Applied(); got != applied {
				t.Errorf("restored Applied() = %d, want %d", got, applied)
			}
			if again := snapshotBytes(t, r); !bytes.Equal(again, b) {
				t.Errorf("snapshot of the restored machine = %x, want %x", again, b)
			}
		})
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	m := sampleMachine(t)
	want := table(m)
	s := m.Snapshot()
	if got := s.Len(); got != len(want) {
		t.Errorf("Snapshot().Len() = %d, want %d", got, len(want))
	}
	b := writeSnapshot(t, s)
	r := restore(t, b)
	if diff := diffTables(table(r), want); diff != "" {
		t.Errorf("restored table (-got +want):\n%s", diff)
	}
	if got, want := r.Applied(), m.Applied(); got != want {
		t.Errorf("restored Applied() = %d, want %d", got, want)
	}
	if got, want := r.Len(), m.Len(); got != want {
		t.Errorf("restored Len() = %d, want %d", got, want)
	}
	if again := snapshotBytes(t, r); !bytes.Equal(again, b) {
		t.Errorf("snapshot of the restored machine differs:\n got %x\nwant %x", again, b)
	}

	// The restored machine goes on exactly as the original: same results, same table.
	cont := []fsm.Command{
		grant("b", "owner-b", 7, matchAny), // same owner: token kept
		expire("b", 1, 4),                  // stale lease rev
		grant("d", "new", 9, matchAbsent),
		expire("c", 3, 3),
		release("a\x00\r\n", byOwner("")),
		grant("\x00", "other", 0, byToken(7)),
	}
	idx := m.Applied() + 1
	for _, c := range cont {
		got, want := r.Apply(idx, c), m.Apply(idx, c)
		if diff := cmpResults(got, want); diff != "" {
			t.Errorf("Apply(%d, %+v) on the restored machine (-got +want):\n%s", idx, c, diff)
		}
		idx++
	}
	if diff := diffTables(table(r), table(m)); diff != "" {
		t.Errorf("tables after continuing (-restored +original):\n%s", diff)
	}
}

// TestRestoreReaders restores through readers that hand out data in awkward pieces.
func TestRestoreReaders(t *testing.T) {
	m := sampleMachine(t)
	b := snapshotBytes(t, m)
	readers := map[string]func() io.Reader{
		"one byte":   func() io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) },
		"half":       func() io.Reader { return iotest.HalfReader(bytes.NewReader(b)) },
		"data + EOF": func() io.Reader { return iotest.DataErrReader(bytes.NewReader(b)) },
	}
	for name, r := range readers {
		t.Run(name, func(t *testing.T) {
			got, err := fsm.Restore(r())
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			if diff := diffTables(table(got), table(m)); diff != "" {
				t.Errorf("restored table (-got +want):\n%s", diff)
			}
		})
	}
	t.Run("reader error", func(t *testing.T) {
		for n := 0; n <= len(b); n++ {
			errBoom := errors.New("boom")
			r := io.MultiReader(bytes.NewReader(b[:n]), iotest.ErrReader(errBoom))
			if got, err := fsm.Restore(r); err == nil {
				t.Errorf("Restore with a reader failing after %d of %d bytes = %v, nil; want an error", n, len(b), got)
			}
		}
	})
}

// TestSnapshotDeterministic builds the same final table through different histories (different
// commands, insertion orders and B-tree shapes; tokens come out equal because the grants that
// survive sit at the same indexes) and checks that the snapshot bytes are identical.
func TestSnapshotDeterministic(t *testing.T) {
	t.Run("small", func(t *testing.T) {
		a := fsm.New()
		applyAll(t, a, 1, []fsm.Command{
			grant("a", "oa", 100, matchAny),  // 1: a token 1
			noop(),                           // 2
			grant("b", "ob", 0, matchAny),    // 3: b token 3
			grant("x", "ox", 10, matchAny),   // 4
			grant("c", "oc", 50, matchAny),   // 5: c token 5
			renew("a", byToken(1), 200),      // 6: a lease rev 6
			release("x", byToken(4)),         // 7
			grant("d", "od", 1, matchAbsent), // 8: d token 8
		})
		b := fsm.New()
		applyAll(t, b, 1, []fsm.Command{
			grant("a", "oa", 50, matchAny),  // 1: a token 1
			grant("c", "zz", 10, matchAny),  // 2
			grant("b", "ob", 0, matchAny),   // 3: b token 3
			release("c", matchAny),          // 4
			grant("c", "oc", 50, matchAny),  // 5: c token 5
			grant("a", "oa", 200, matchAny), // 6: same owner, token 1 kept, lease rev 6
			noop(),                          // 7
			grant("d", "od", 1, matchAny),   // 8: d token 8
		})
		compareSnapshots(t, a, b)
	})
	t.Run("large", func(t *testing.T) {
		// a grants 2000 keys, in descending key order, then releases every other one; b grants
		// only the survivors, at the same indexes, so with the same tokens, and the last key,
		// released as a releases it, so its token counter ends where a's does; c is a restored
		// copy of a (its tree is bulk-loaded in ascending order). Three tree shapes, one table.
		const n = 2000
		key := func(i int) string { return fmt.Sprintf("key-%05d", n-i) }
		a, b := fsm.New(), fsm.New()
		for i := range n {
			a.Apply(uint64(i+1), grant(key(i), "o", uint64(i), matchAny))
		}
		for i := 1; i < n; i += 2 {
			a.Apply(uint64(n+i), release(key(i), matchAny))
		}
		a.Advance(2 * n)
		for i := range n {
			if i%2 == 0 || i == n-1 {
				b.Apply(uint64(i+1), grant(key(i), "o", uint64(i), matchAbsent))
			} else {
				b.Apply(uint64(i+1), noop())
			}
		}
		b.Apply(uint64(2*n-1), release(key(n-1), matchAny))
		b.Advance(2 * n)
		compareSnapshots(t, a, b)

		c := restore(t, snapshotBytes(t, a))
		compareSnapshots(t, a, c)

		// Renew the survivors in a shuffled order on a and c; b renews them through a
		// same-owner grant (token kept) at the same indexes.
		rng := rand.New(rand.NewPCG(1, 2))
		idx := a.Applied()
		for _, p := range rng.Perm(n / 2) {
			idx++
			k := key(2 * p)
			a.Apply(idx, renew(k, matchAny, 77))
			c.Apply(idx, renew(k, byOwner("o"), 77))
			b.Apply(idx, grant(k, "o", 77, matchAny))
		}
		compareSnapshots(t, a, b)
		compareSnapshots(t, a, c)
	})
}

func compareSnapshots(t *testing.T, a, b *fsm.Machine) {
	t.Helper()
	if diff := diffTables(table(a), table(b)); diff != "" {
		t.Fatalf("the two histories give different tables, fix the test (-a +b):\n%s", diff)
	}
	if a.Applied() != b.Applied() || a.LastToken() != b.LastToken() {
		t.Fatalf("the two histories end at different indexes %d and %d or last tokens %d and %d, fix the test",
			a.Applied(), b.Applied(), a.LastToken(), b.LastToken())
	}
	sa, sb := snapshotBytes(t, a), snapshotBytes(t, b)
	if !bytes.Equal(sa, sb) {
		t.Errorf("snapshot bytes differ for equal tables:\n a %x\n b %x", sa, sb)
	}
	if again := snapshotBytes(t, a); !bytes.Equal(again, sa) {
		t.Errorf("two snapshots of the same machine differ:\n%x\n%x", again, sa)
	}
}

// TestSnapshotIsolation checks that a Snapshot keeps the table as it was when it was taken while
// the machine goes on applying (copy-on-write).
func TestSnapshotIsolation(t *testing.T) {
	m := fsm.New()
	idx := uint64(1)
	for i := range 500 {
		m.Apply(idx, grant(fmt.Sprintf("k%03d", i), "o1", 1000, matchAny))
		idx++
	}
	wantTable := table(m)
	wantApplied := m.Applied()
	s := m.Snapshot()
	before := writeSnapshot(t, s)

	// Change every kind of thing: replace holders, renew, release, expire, add keys.
	for i := range 500 {
		k := fmt.Sprintf("k%03d", i)
		switch i % 5 {
		case 0:
			m.Apply(idx, grant(k, "o2", 1, matchAny))
		case 1:
			m.Apply(idx, renew(k, matchAny, 9))
		case 2:
			m.Apply(idx, release(k, matchAny))
		case 3:
			m.Apply(idx, expire(k, fsm.Token(i+1), uint64(i+1)))
		case 4:
			m.Apply(idx, grant(k+"new", "o3", 0, matchAny))
		}
		idx++
	}
	if diff := diffTables(table(m), wantTable); diff == "" {
		t.Fatalf("the machine did not change, fix the test")
	}
	if got := s.Len(); got != len(wantTable) {
		t.Errorf("Snapshot.Len() after more applies = %d, want %d", got, len(wantTable))
	}
	after := writeSnapshot(t, s)
	if !bytes.Equal(after, before) {
		t.Errorf("snapshot bytes changed after the machine applied more entries")
	}
	r := restore(t, after)
	if diff := diffTables(table(r), wantTable); diff != "" {
		t.Errorf("table restored from the old snapshot (-got +want):\n%s", diff)
	}
	if got := r.Applied(); got != wantApplied {
		t.Errorf("restored Applied() = %d, want %d", got, wantApplied)
	}

	// The restored machine is independent of the one it came from, and of the snapshot.
	r.Apply(idx, release("k000", matchAny))
	if _, ok := m.Get([]byte("k000")); !ok {
		t.Errorf("a release on the restored machine removed the key from the original")
	}
	if again := writeSnapshot(t, s); !bytes.Equal(again, before) {
		t.Errorf("snapshot bytes changed after the restored machine applied an entry")
	}
}

// TestSnapshotConcurrentWithApply serializes snapshots on another goroutine while the machine
// keeps applying, as raft runs Persist concurrently with Apply. Run it with -race.
func TestSnapshotConcurrentWithApply(t *testing.T) {
	type job struct {
		s       *fsm.Snapshot
		table   map[string]fsm.Lock
		applied uint64
	}
	jobs := make(chan job) // unbuffered: each hand-off is one snapshot
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for j := range jobs {
			var first []byte
			for range 3 { // serialize while the main goroutine applies, several times
				var buf bytes.Buffer
				if _, err := j.s.WriteTo(&buf); err != nil {
					t.Errorf("WriteTo: %v", err)
					break // keep receiving: the main goroutine must not block
				}
				if first != nil && !bytes.Equal(buf.Bytes(), first) {
					t.Errorf("snapshot at %d: bytes changed between two serializations", j.applied)
				}
				first = buf.Bytes()
			}
			r, err := fsm.Restore(bytes.NewReader(first))
			if err != nil {
				t.Errorf("Restore: %v", err)
				continue
			}
			if diff := diffTables(table(r), j.table); diff != "" {
				t.Errorf("snapshot at %d restored a different table (-got +want):\n%s", j.applied, diff)
			}
			if r.Applied() != j.applied {
				t.Errorf("snapshot at %d restored Applied() = %d", j.applied, r.Applied())
			}
		}
	}()

	rng := rand.New(rand.NewPCG(7, 7))
	m := fsm.New()
	idx := uint64(0)
	const rounds, perRound = 20, 400
	for range rounds {
		for range perRound {
			idx++
			k := fmt.Sprintf("k%03d", rng.IntN(300))
			switch rng.IntN(4) {
			case 0, 1:
				m.Apply(idx, grant(k, fmt.Sprint(rng.IntN(3)), uint64(rng.IntN(5)), matchAny))
			case 2:
				m.Apply(idx, release(k, matchAny))
			case 3:
				m.Apply(idx, renew(k, matchAny, 1+uint64(rng.IntN(5))))
			}
		}
		jobs <- job{s: m.Snapshot(), table: table(m), applied: m.Applied()}
	}
	close(jobs)
	wg.Wait()
}

// rawSnapshot builds snapshot bytes by hand, with a correct checksum unless told otherwise, so
// tests can reach the checks behind the checksum.
type rawSnapshot struct {
	magic     string
	version   byte
	applied   uint64
	lastToken fsm.Token // version 2 on
	count     uint64
	records   [][]byte
	members   [][2]string // id, address, in ID order
}

func (r rawSnapshot) bytes() []byte {
	b := append([]byte(r.magic), r.version)
	b = binary.AppendUvarint(b, r.applied)
	if r.version >= 2 {
		b = binary.AppendUvarint(b, uint64(r.lastToken))
	}
	b = binary.AppendUvarint(b, r.count)
	for _, rec := range r.records {
		b = append(b, rec...)
	}
	b = binary.AppendUvarint(b, uint64(len(r.members)))
	for _, m := range r.members {
		b = binary.AppendUvarint(b, uint64(len(m[0])))
		b = append(b, m[0]...)
		b = binary.AppendUvarint(b, uint64(len(m[1])))
		b = append(b, m[1]...)
	}
	b = binary.AppendUvarint(b, 0) // no scripts
	if r.version >= 5 {
		b = binary.AppendUvarint(b, 0) // no users
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// record encodes one lock as a snapshot record.
func record(key, owner string, tok fsm.Token, leaseRev, leaseMs uint64) []byte {
	b := binary.AppendUvarint(nil, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(owner)))
	b = append(b, owner...)
	b = binary.AppendUvarint(b, uint64(tok))
	b = binary.AppendUvarint(b, leaseRev)
	return binary.AppendUvarint(b, leaseMs)
}

// recordV4 is record in a version 4 snapshot: a string's, whose collection is none (type 0).
func recordV4(key, owner string, tok fsm.Token, leaseRev, leaseMs uint64) []byte {
	b := binary.AppendUvarint(nil, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(owner)))
	b = append(b, owner...)
	b = append(b, 0)
	b = binary.AppendUvarint(b, uint64(tok))
	b = binary.AppendUvarint(b, leaseRev)
	return binary.AppendUvarint(b, leaseMs)
}

func TestRawSnapshotMatchesWriteTo(t *testing.T) {
	// The hand-built layout is the real one: otherwise the rejections below prove nothing.
	m := fsm.New()
	applyAll(t, m, 1, []fsm.Command{grant("a", "oa", 5, matchAny), grant("b", "", 0, matchAny),
		{Kind: fsm.KindSetMember, Key: []byte("n2"), Owner: []byte("127.0.0.1:6380")},
		{Kind: fsm.KindSetMember, Key: []byte("n1"), Owner: []byte("127.0.0.1:6379")}})
	m.Advance(300)
	m.NoteFormat(fsm.FormatTyped) // the layout of a cluster whose members all read version 5 snapshots
	want := rawSnapshot{magic: "RLSN", version: 5, applied: 300, lastToken: 2, count: 2, records: [][]byte{
		recordV4("a", "oa", 1, 1, 5), recordV4("b", "", 2, 2, 0),
	}, members: [][2]string{{"n1", "127.0.0.1:6379"}, {"n2", "127.0.0.1:6380"}}}.bytes()
	if got := snapshotBytes(t, m); !bytes.Equal(got, want) {
		t.Fatalf("snapshot = %x, want %x", got, want)
	}
	r := restore(t, want)
	if diff := diffTables(table(r), table(m)); diff != "" {
		t.Errorf("restored table (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(r.Members(), m.Members()); diff != "" {
		t.Errorf("restored members (-got +want):\n%s", diff)
	}
}

// TestRestoreTokenCounter restores the counter of each version: a version 2 snapshot's own (but
// never below a token it holds), a version 1 snapshot's from its tokens and applied index, since
// tokens were log indexes then.
func TestRestoreTokenCounter(t *testing.T) {
	recs := [][]byte{record("a", "oa", 40, 40, 5), record("b", "ob", 7, 7, 0)}
	tests := []struct {
		name string
		raw  rawSnapshot
		want fsm.Token
	}{
		{"v2", rawSnapshot{version: 2, applied: 50, lastToken: 90, count: 2, records: recs}, 90},
		{"v2 counter below a token", rawSnapshot{version: 2, applied: 50, lastToken: 3, count: 2, records: recs}, 40},
		{"v2 counter zero (WriteTableTo)", rawSnapshot{version: 2, applied: 0, count: 2, records: recs}, 40},
		{"v1 applied above the tokens", rawSnapshot{version: 1, applied: 50, count: 2, records: recs}, 50},
		{"v1 applied below a token", rawSnapshot{version: 1, applied: 20, count: 2, records: recs}, 40},
		{"v1 empty", rawSnapshot{version: 1, applied: 9}, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.raw.magic = "RLSN"
			m := restore(t, tt.raw.bytes())
			if got := m.LastToken(); got != tt.want {
				t.Errorf("LastToken() = %d, want %d", got, tt.want)
			}
			// The next grant hands out a token above every one before, at least its index.
			idx := m.Applied() + 1
			r := m.Apply(idx, grant("new", "o", 0, matchAbsent))
			if want := max(tt.want+1, fsm.Token(idx)); r.Token != want {
				t.Errorf("next grant at %d got token %d, want %d", idx, r.Token, want)
			}
		})
	}
}

func TestRestoreRejects(t *testing.T) {
	good := snapshotBytes(t, sampleMachine(t))
	ok := func(records ...[]byte) rawSnapshot {
		return rawSnapshot{magic: "RLSN", version: 1, applied: 10, count: uint64(len(records)), records: records}
	}
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"bad magic", rawSnapshot{magic: "RLSX", version: 1}.bytes()},
		{"lower-case magic", rawSnapshot{magic: "rlsn", version: 1}.bytes()},
		{"version 0", rawSnapshot{magic: "RLSN", version: 0}.bytes()},
		{"version 6", rawSnapshot{magic: "RLSN", version: 6}.bytes()},
		{"version 255", rawSnapshot{magic: "RLSN", version: 255}.bytes()},
		{"bytes after the checksum", append(bytes.Clone(good), 0)},
		{"twice", append(bytes.Clone(good), good...)},
		{"count above the records", func() []byte { r := ok(record("a", "o", 1, 1, 1)); r.count = 2; return r.bytes() }()},
		{"count below the records", func() []byte {
			r := ok(record("a", "o", 1, 1, 1), record("b", "o", 2, 2, 1))
			r.count = 1
			return r.bytes()
		}()},
		{"huge count", func() []byte { r := ok(); r.count = math.MaxUint64; return r.bytes() }()},
		{"empty key", ok(record("", "o", 1, 1, 1)).bytes()},
		{"token 0", ok(record("a", "o", 0, 1, 1)).bytes()},
		{"keys out of order", ok(record("b", "o", 1, 1, 1), record("a", "o", 2, 2, 1)).bytes()},
		{"duplicate key", ok(record("a", "o", 1, 1, 1), record("a", "o", 2, 2, 1)).bytes()},
		{"key length above the limit", ok(append(binary.AppendUvarint(nil, maxSnapshotField+1), 'a')).bytes()},
		{"owner length above the limit", ok(append([]byte{1, 'a'}, binary.AppendUvarint(nil, math.MaxUint64)...)).bytes()},
		{"key length past the end", ok([]byte{100, 'a'}).bytes()},
		{"varint overflow", ok(bytes.Repeat([]byte{0xff}, 11)).bytes()},
	}
	for n := range len(good) {
		tests = append(tests, struct {
			name string
			b    []byte
		}{fmt.Sprintf("truncated to %d of %d bytes", n, len(good)), good[:n:n]})
	}
	for i := range len(good) {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			b := bytes.Clone(good)
			b[i] ^= mask
			tests = append(tests, struct {
				name string
				b    []byte
			}{fmt.Sprintf("byte %d xor %#02x", i, mask), b})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := fsm.Restore(bytes.NewReader(tt.b))
			if err == nil {
				t.Fatalf("Restore(%x) = table of %d locks, nil; want an error", tt.b, m.Len())
			}
			if !errors.Is(err, fsm.ErrCorrupt) {
				t.Errorf("Restore(%x) error = %v, want one wrapping ErrCorrupt", tt.b, err)
			}
			if m != nil {
				t.Errorf("Restore returned a machine with its error")
			}
		})
	}
}

// TestRestoreBoundedAllocation: a corrupt length in a few bytes of input must not make Restore
// allocate more than one field of the maximum size.
func TestRestoreBoundedAllocation(t *testing.T) {
	ok := func(records ...[]byte) []byte {
		return rawSnapshot{magic: "RLSN", version: 1, applied: 1, count: uint64(len(records)), records: records}.bytes()
	}
	tests := []struct {
		name string
		b    []byte
	}{
		{"key of 1 GiB", ok(append(binary.AppendUvarint(nil, 1<<30), 'a'))},
		{"key of max+1", ok(append(binary.AppendUvarint(nil, maxSnapshotField+1), 'a'))},
		{"owner of 1 GiB", ok(append([]byte{1, 'a'}, binary.AppendUvarint(nil, 1<<30)...))},
		{"count of 2^62", func() []byte { b := rawSnapshot{magic: "RLSN", version: 1, count: 1 << 62}; return b.bytes() }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := allocated(func() {
				if _, err := fsm.Restore(bytes.NewReader(tt.b)); err == nil {
					t.Errorf("Restore(%x) accepted a corrupt snapshot", tt.b)
				}
			})
			if limit := uint64(maxSnapshotField + 1<<20); got > limit {
				t.Errorf("Restore of %d bytes allocated %d bytes, more than %d", len(tt.b), got, limit)
			}
		})
	}
}

// allocated returns the bytes allocated while fn ran.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// failingWriter accepts limit bytes, then fails.
type failingWriter struct {
	limit int
	buf   bytes.Buffer
}

var errWriteFailed = errors.New("write failed")

func (w *failingWriter) Write(p []byte) (int, error) {
	if room := w.limit - w.buf.Len(); len(p) > room {
		w.buf.Write(p[:room])
		return room, errWriteFailed
	}
	return w.buf.Write(p)
}

// TestWriteToErrors checks that WriteTo reports a failing writer, and, as io.WriterTo requires,
// returns the number of bytes the writer took. The large snapshot outgrows WriteTo's buffer, so
// writes fail in the middle of the records too.
func TestWriteToErrors(t *testing.T) {
	large := fsm.New()
	for i := range 5000 {
		large.Apply(uint64(i+1), grant(fmt.Sprintf("key-%06d", i), "some owner value", 30000, matchAny))
	}
	for _, tc := range []struct {
		name string
		s    *fsm.Snapshot
		step int
	}{
		{"small", sampleMachine(t).Snapshot(), 1},
		{"large", large.Snapshot(), 997},
	} {
		full := writeSnapshot(t, tc.s)
		limits := []int{len(full) - 4, len(full) - 3, len(full) - 2, len(full) - 1}
		for l := 0; l < len(full)-4; l += tc.step {
			limits = append(limits, l)
		}
		for _, limit := range limits {
			t.Run(fmt.Sprintf("%s/%d", tc.name, limit), func(t *testing.T) {
				w := &failingWriter{limit: limit}
				n, err := tc.s.WriteTo(w)
				if !errors.Is(err, errWriteFailed) {
					t.Errorf("WriteTo to a writer failing after %d of %d bytes: error %v, want %v", limit, len(full), err, errWriteFailed)
				}
				if n != int64(w.buf.Len()) {
					t.Errorf("WriteTo to a writer failing after %d of %d bytes: n = %d, but the writer took %d", limit, len(full), n, w.buf.Len())
				}
			})
		}
	}
}

// FuzzRestore: Restore never panics and allocates no more than its input justifies plus one field
// of the maximum size; a table it accepts snapshots and restores to itself.
func FuzzRestore(f *testing.F) {
	f.Add([]byte{})
	f.Add(rawSnapshot{magic: "RLSN", version: 1}.bytes())
	f.Add(rawSnapshot{magic: "RLSN", version: 1, applied: 3, count: 2, records: [][]byte{
		record("a", "oa", 1, 1, 5), record("b", "", 2, 2, 0),
	}}.bytes())
	f.Add(rawSnapshot{magic: "RLSN", version: 1, count: 1, records: [][]byte{{0xff, 0xff, 0xff, 0x1f}}}.bytes())
	f.Add(rawSnapshot{magic: "RLSN", version: 1, count: 1, records: [][]byte{binary.AppendUvarint(nil, 1<<30)}}.bytes())
	m := fsm.New()
	for i := range 40 {
		m.Apply(uint64(i+1), grant(fmt.Sprintf("key%d\x00", i%25), fmt.Sprint(i%3), uint64(i), matchAny))
	}
	var buf bytes.Buffer
	if _, err := m.Snapshot().WriteTo(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	// Version 2: hand-built, and written after entries of several grants (tokens above indexes).
	f.Add(rawSnapshot{magic: "RLSN", version: 2, applied: 3, lastToken: 9, count: 2, records: [][]byte{
		record("a", "oa", 1, 1, 5), record("b", "", 9, 2, 0),
	}}.bytes())
	for i := range 10 {
		m.ApplyEntry(nil, uint64(41+i), []fsm.Command{
			grant(fmt.Sprintf("e%d", i), "x", 1, matchAbsent), grant(fmt.Sprintf("f%d", i), "y", 0, matchAny),
			release(fmt.Sprintf("key%d\x00", i), matchAny),
		})
	}
	buf.Reset()
	if _, err := m.Snapshot().WriteTo(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	// Written by an older binary (version 1).
	for _, name := range []string{goldenSnapMid, goldenSnapLast} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}

	f.Fuzz(func(t *testing.T, b []byte) {
		var m *fsm.Machine
		var err error
		got := allocated(func() { m, err = fsm.Restore(bytes.NewReader(b)) })
		// 256 KiB of read buffer, one field of the maximum size (allocated before it is read),
		// and a generous constant factor for the table built from the bytes actually there.
		if limit := uint64(maxSnapshotField + 1<<20 + 512*len(b)); got > limit {
			t.Errorf("Restore of %d bytes allocated %d bytes, more than %d", len(b), got, limit)
		}
		if err != nil {
			if m != nil {
				t.Errorf("Restore returned a machine with its error %v", err)
			}
			if !errors.Is(err, fsm.ErrCorrupt) {
				t.Errorf("Restore error = %v, want one wrapping ErrCorrupt", err)
			}
			return
		}
		var out bytes.Buffer
		if _, err := m.Snapshot().WriteTo(&out); err != nil {
			t.Fatalf("WriteTo: %v", err)
		}
		r, err := fsm.Restore(bytes.NewReader(out.Bytes()))
		if err != nil {
			t.Fatalf("Restore of the snapshot of an accepted table: %v", err)
		}
		if diff := diffTables(table(r), table(m)); diff != "" {
			t.Errorf("table changed through snapshot and restore (-got +want):\n%s", diff)
		}
		if r.LastToken() != m.LastToken() {
			t.Errorf("LastToken() = %d after snapshot and restore, want %d", r.LastToken(), m.LastToken())
		}
		m.Scan(func(key string, l fsm.Lock) bool {
			if l.Token > m.LastToken() {
				t.Errorf("restored lock %q has token %d above the counter %d", key, l.Token, m.LastToken())
			}
			return true
		})
		if r.Applied() != m.Applied() {
			t.Errorf("Applied() = %d after snapshot and restore, want %d", r.Applied(), m.Applied())
		}
	})
}

// BenchmarkRestore restores a snapshot of 100k leased locks:
// go test -run x -bench Restore ./fsm/
func BenchmarkRestore(b *testing.B) {
	m := fsm.New()
	for i := range 100_000 {
		m.Apply(uint64(i+1), fsm.Command{Kind: fsm.KindGrant, Key: fmt.Appendf(nil, "scale:%d", i),
			Owner: []byte("owner-0123456789abcdef"), LeaseMs: 30_000, Match: fsm.Match{Kind: fsm.MatchAbsent}})
	}
	var buf bytes.Buffer
	if _, err := m.Snapshot().WriteTo(&buf); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(buf.Len()))
	for b.Loop() {
		if _, err := fsm.Restore(bytes.NewReader(buf.Bytes())); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSnapshotKeepsUsers(t *testing.T) {
	m := fsm.New()
	applyAll(t, m, 1, []fsm.Command{
		{Kind: fsm.KindSetUser, Key: []byte("alice"), Owner: []byte("on nopass ~locks:* resetchannels -@all +get")},
		{Kind: fsm.KindSetUser, Key: []byte("bob"), Owner: []byte("off resetchannels -@all")},
		{Kind: fsm.KindDelUser, Key: []byte("bob")},
	})
	r := restore(t, snapshotBytes(t, m))
	want := map[string]string{"alice": "on nopass ~locks:* resetchannels -@all +get", "bob": ""}
	if diff := cmp.Diff(r.Users(), want); diff != "" {
		t.Errorf("restored users (-got +want):\n%s", diff)
	}
}

func TestAbortedEntryRestoresUsers(t *testing.T) {
	m := fsm.New()
	applyAll(t, m, 1, []fsm.Command{{Kind: fsm.KindSetUser, Key: []byte("alice"), Owner: []byte("on nopass")}})
	res := m.ApplyEntry(nil, 2, []fsm.Command{
		{Kind: fsm.KindDelUser, Key: []byte("alice")},
		{Kind: fsm.KindSetUser, Key: []byte("carol"), Owner: []byte("on nopass")},
		{Kind: fsm.KindRelease, Key: fsm.DBKey(0, []byte("nokey")), Match: fsm.Match{Kind: fsm.MatchAny}},
	})
	if !fsm.Aborted(res) {
		t.Fatalf("results %v, want the entry aborted", res)
	}
	if diff := cmp.Diff(m.Users(), map[string]string{"alice": "on nopass"}); diff != "" {
		t.Errorf("users after the abort (-got +want):\n%s", diff)
	}
}

// KindForgetUser leaves no record (no tombstone), is undone with an aborted entry, and only a
// FormatBatch cluster carries it.
func TestForgetUser(t *testing.T) {
	m := fsm.New()
	applyAll(t, m, 1, []fsm.Command{
		{Kind: fsm.KindSetUser, Key: []byte("alice"), Owner: []byte("on nopass")},
		{Kind: fsm.KindSetUser, Key: []byte("bob"), Owner: []byte("on nopass")},
		{Kind: fsm.KindForgetUser, Key: []byte("bob")},
		{Kind: fsm.KindForgetUser, Key: []byte("nobody")},
	})
	if diff := cmp.Diff(m.Users(), map[string]string{"alice": "on nopass"}); diff != "" {
		t.Errorf("users (-got +want):\n%s", diff)
	}
	res := m.ApplyEntry(nil, 2, []fsm.Command{
		{Kind: fsm.KindForgetUser, Key: []byte("alice")},
		{Kind: fsm.KindRelease, Key: fsm.DBKey(0, []byte("nokey")), Match: fsm.Match{Kind: fsm.MatchAny}},
	})
	if !fsm.Aborted(res) {
		t.Fatalf("results %v, want the entry aborted", res)
	}
	if diff := cmp.Diff(restore(t, snapshotBytes(t, m)).Users(), map[string]string{"alice": "on nopass"}); diff != "" {
		t.Errorf("restored users after the abort (-got +want):\n%s", diff)
	}
	forget := []fsm.Command{{Kind: fsm.KindForgetUser, Key: []byte("alice")}}
	if got := fsm.NeedsFormat(forget); got != fsm.FormatBatch {
		t.Errorf("NeedsFormat(forget-user) = %d, want FormatBatch (%d)", got, fsm.FormatBatch)
	}
	if _, err := fsm.EncodeEntryIn(nil, forget, fsm.FormatKeyed); err == nil {
		t.Error("forget-user encoded in FormatKeyed (v0.1.0's format)")
	}
}
