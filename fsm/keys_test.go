package fsm_test

import (
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// The same client key in two databases is two keys; each database counts its own, through
// grants, releases, an aborted entry's rollback, and a snapshot.
func TestDatabases(t *testing.T) {
	m := fsm.New()
	k0, k3 := fsm.DBKey(0, []byte("job")), fsm.DBKey(3, []byte("job"))
	g := func(k []byte, owner string) fsm.Command {
		return fsm.Command{Kind: fsm.KindGrant, Key: k, Owner: []byte(owner), Match: fsm.Match{Kind: fsm.MatchAbsent}}
	}
	res := m.ApplyEntry(nil, 1, []fsm.Command{g(k0, "a"), g(k3, "b")})
	if res[0].Status != fsm.StatusGranted || res[1].Status != fsm.StatusGranted {
		t.Fatalf("grants of job in databases 0 and 3: %+v", res)
	}
	if m.LenDB(0) != 1 || m.LenDB(3) != 1 || m.LenDB(1) != 0 || m.Len() != 2 {
		t.Fatalf("LenDB(0,3,1) = %d %d %d, Len %d; want 1 1 0, 2", m.LenDB(0), m.LenDB(3), m.LenDB(1), m.Len())
	}
	if db, key := fsm.SplitDBKey(k3); db != 3 || string(key) != "job" {
		t.Errorf("SplitDBKey = %d %q", db, key)
	}
	// A grant of a new key in database 5, then a failed guard: rolled back, counts too.
	res = m.ApplyEntry(nil, 2, []fsm.Command{g(fsm.DBKey(5, []byte("x")), "c"), g(k0, "d")})
	if res[1].Status != fsm.StatusGrantRejected || m.LenDB(5) != 0 {
		t.Fatalf("aborted entry: %+v, LenDB(5) = %d; want rejected and 0", res, m.LenDB(5))
	}
	m.ApplyEntry(nil, 3, []fsm.Command{{Kind: fsm.KindRelease, Key: k0, Match: fsm.Match{Kind: fsm.MatchAny}}})
	if m.LenDB(0) != 0 || m.LenDB(3) != 1 {
		t.Fatalf("after releasing database 0's job: LenDB(0) %d, LenDB(3) %d", m.LenDB(0), m.LenDB(3))
	}
	r := restore(t, snapshotBytes(t, m))
	if r.LenDB(3) != 1 || r.Len() != 1 {
		t.Errorf("restored: LenDB(3) = %d, Len %d; want 1, 1", r.LenDB(3), r.Len())
	}
	if _, ok := r.Get(k3); !ok {
		t.Error("restored table lacks database 3's job")
	}
}

// FLUSHDB deletes one database's keys and no other's; FLUSHALL every key; a flush in an entry
// that aborts is undone whole.
func TestFlush(t *testing.T) {
	m := fsm.New()
	g := func(db int, k string) fsm.Command {
		return fsm.Command{Kind: fsm.KindGrant, Key: fsm.DBKey(db, []byte(k)), Owner: []byte("o"), Match: fsm.Match{Kind: fsm.MatchAbsent}}
	}
	m.ApplyEntry(nil, 1, []fsm.Command{g(1, "a"), g(1, "b"), g(2, "a"), g(0, "z")})
	res := m.ApplyEntry(nil, 2, []fsm.Command{{Kind: fsm.KindFlush, Key: []byte{1}}})
	if res[0].Status != fsm.StatusFlushed || !res[0].Existed || m.LenDB(1) != 0 || m.LenDB(2) != 1 || m.Len() != 2 {
		t.Fatalf("FLUSHDB 1: %+v; LenDB(1) %d, LenDB(2) %d, Len %d", res, m.LenDB(1), m.LenDB(2), m.Len())
	}
	// A flush of everything, then a guard that fails (its key is gone): all undone.
	res = m.ApplyEntry(nil, 3, []fsm.Command{{Kind: fsm.KindFlush},
		{Kind: fsm.KindRelease, Key: fsm.DBKey(2, []byte("a")), Match: fsm.Match{Kind: fsm.MatchAny}}})
	if res[1].Status != fsm.StatusNotFound || res[0].Status != fsm.StatusAborted || m.Len() != 2 {
		t.Fatalf("aborted FLUSHALL: %+v, Len %d; want the table untouched", res, m.Len())
	}
	if m.LenDB(0) != 1 || m.LenDB(2) != 1 {
		t.Errorf("after the rollback: LenDB(0) %d, LenDB(2) %d; want 1, 1", m.LenDB(0), m.LenDB(2))
	}
	m.ApplyEntry(nil, 4, []fsm.Command{{Kind: fsm.KindFlush}})
	if m.Len() != 0 || m.LenDB(0) != 0 || m.LenDB(2) != 0 {
		t.Errorf("FLUSHALL left %d keys", m.Len())
	}
	if err := (fsm.Command{Kind: fsm.KindFlush, Key: []byte{16}}).Validate(); err == nil {
		t.Error("a flush of database 16 is valid")
	}
}
