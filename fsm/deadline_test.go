package fsm_test

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/raftlock/raftlock/fsm"
)

// A lease's Deadline is the lease clock at apply plus its length: set by Grant, Renew and Write,
// kept with the lease (KEEPTTL), cleared with it, restarted in full by RestoreAt; the snapshot's
// bytes and every result do not depend on the clock; Leases counts the leased keys.
func TestLeaseDeadline(t *testing.T) {
	const ms = int64(1e6)
	m := fsm.New()
	deadline := func(key string) int64 {
		t.Helper()
		l, ok := m.Get([]byte(key))
		if !ok {
			t.Fatalf("%q not held", key)
		}
		return l.Deadline
	}
	other := fsm.New() // the same entries at another clock
	apply := func(index uint64, now int64, c fsm.Command) fsm.Result {
		t.Helper()
		m.SetLeaseClock(now)
		res := m.Apply(index, c)
		other.SetLeaseClock(now + 12345*ms)
		if got := other.Apply(index, c); cmpResults(got, res) != "" {
			t.Fatalf("entry %d: result %+v at another clock, %+v here", index, got, res)
		}
		return res
	}
	a := apply(1, 1000*ms, grant("\x00a", "o1", 500, matchAbsent))
	apply(2, 1000*ms, grant("\x00b", "o1", 0, matchAbsent))
	apply(3, 1100*ms, grant("\x01c", "o1", 300, matchAbsent))
	if got := deadline("\x00a"); got != 1500*ms {
		t.Errorf("granted at 1000 ms for 500 ms: Deadline %d ms, want 1500", got/ms)
	}
	if stored, l, _ := m.Entry([]byte("\x00a")); a.Stored != stored || a.Deadline != l.Deadline || unsafe.StringData(a.Stored) != unsafe.StringData(stored) {
		t.Errorf("the grant's result: Stored %q, Deadline %d; want the table's own %q, %d", a.Stored, a.Deadline, stored, l.Deadline)
	}
	if got := deadline("\x00b"); got != 0 {
		t.Errorf("no lease: Deadline %d, want 0", got)
	}
	if m.Leases() != 2 || m.LeasesDB(0) != 1 || m.LeasesDB(1) != 1 {
		t.Errorf("Leases %d, per db %d %d; want 2, 1 1", m.Leases(), m.LeasesDB(0), m.LeasesDB(1))
	}
	apply(4, 1200*ms, renew("\x00a", byToken(a.Token), 1000))
	if got := deadline("\x00a"); got != 2200*ms {
		t.Errorf("renewed at 1200 ms for 1000 ms: Deadline %d ms, want 2200", got/ms)
	}
	apply(5, 1300*ms, grantKeep("\x00a", "o2", 0, matchAny))
	if got := deadline("\x00a"); got != 2200*ms {
		t.Errorf("KEEPTTL for a new holder at 1300 ms: Deadline %d ms, want the kept 2200", got/ms)
	}
	apply(6, 1400*ms, grant("\x00a", "o3", 0, matchAny)) // a plain SET drops the lease
	if got := deadline("\x00a"); got != 0 {
		t.Errorf("lease dropped: Deadline %d, want 0", got)
	}
	apply(7, 1400*ms, renew("\x00b", byToken(2), 100))
	apply(8, 1400*ms, release("\x01c", matchAny))
	if m.Leases() != 1 || m.LeasesDB(0) != 1 || m.LeasesDB(1) != 0 {
		t.Errorf("after drop, renew, release: Leases %d, per db %d %d; want 1, 1 0", m.Leases(), m.LeasesDB(0), m.LeasesDB(1))
	}

	snap := snapshotBytes(t, m)
	if !bytes.Equal(snap, snapshotBytes(t, other)) {
		t.Errorf("the snapshot's bytes depend on the lease clock")
	}
	r, err := fsm.RestoreAt(bytes.NewReader(snap), 5000*ms)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := r.Get([]byte("\x00b")); l.Deadline != 5100*ms {
		t.Errorf("restored at 5000 ms, a 100 ms lease: Deadline %d ms, want 5100 (in full from the restore)", l.Deadline/ms)
	}
	if r.Leases() != 1 || r.LeasesDB(0) != 1 {
		t.Errorf("restored: Leases %d, db 0 %d; want 1, 1", r.Leases(), r.LeasesDB(0))
	}

	// A failed guard puts the lease (and its count) back.
	m.SetLeaseClock(6000 * ms)
	m.ApplyEntry(nil, 9, []fsm.Command{renew("\x00b", byToken(2), 7000), grant("\x00b", "x", 1, matchAbsent)})
	if got := deadline("\x00b"); got != 1500*ms || m.Leases() != 1 {
		t.Errorf("after an aborted entry: Deadline %d ms, Leases %d; want 1500, 1", got/ms, m.Leases())
	}
	apply(10, 7000*ms, fsm.Command{Kind: fsm.KindFlush})
	if m.Leases() != 0 || m.Len() != 0 {
		t.Errorf("after FLUSHALL: Leases %d, Len %d; want 0, 0", m.Leases(), m.Len())
	}
}

// Entry finds what Get finds, and hands out the table's own key.
func TestEntry(t *testing.T) {
	m := fsm.New()
	applyAll(t, m, 1, []fsm.Command{grant("\x00a", "o", 10, matchAbsent), grant("\x00c", "o", 10, matchAbsent)})
	for _, key := range []string{"\x00a", "\x00b", "\x00c", "\x00d", ""} {
		want, wantOK := m.Get([]byte(key))
		k, got, ok := m.Entry([]byte(key))
		if ok != wantOK || ok && (k != key || diffTables(map[string]fsm.Lock{k: got}, map[string]fsm.Lock{key: want}) != "") {
			t.Errorf("Entry(%q) = %q, %+v, %v; want %+v, %v", key, k, got, ok, want, wantOK)
		}
	}
}
