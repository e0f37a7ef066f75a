package fsm_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/raftlock/raftlock/fsm"
)

func hash(fv ...string) *fsm.Collection {
	c := &fsm.Collection{Type: fsm.TypeHash}
	for _, s := range fv {
		c.Elems = append(c.Elems, []byte(s))
	}
	return c
}

// write is a Write that keeps the key's lease, as HSET, ZADD and LPUSH do.
func write(key string, v *fsm.Collection, mt fsm.Match) fsm.Command {
	return fsm.Command{Kind: fsm.KindWrite, Key: []byte(key), Value: v, Match: mt, KeepLease: true}
}

func byRev(rev uint64) fsm.Match { return fsm.Match{Kind: fsm.MatchRev, Rev: rev} }

// TestWrite follows one hash through its life: created with a new token and no lease, changed
// under the rev it was seen at (keeping its token and lease), refused under a stale rev, and
// deleted by an empty value.
func TestWrite(t *testing.T) {
	m := fsm.New()
	applyAll(t, m, 1, []fsm.Command{grant("other", "o", 0, matchAny)}) // token 1

	r := m.Apply(5, write("h", hash("owner", "1"), matchAbsent))
	if r.Status != fsm.StatusWritten || r.Token != 5 || r.Existed || r.LeaseMs != 0 {
		t.Fatalf("create = %+v, want written, token 5, not existed, no lease", r)
	}
	if r := m.Apply(6, write("h", hash("x", "y"), matchAbsent)); r.Status != fsm.StatusConflict || !r.GuardFailed() {
		t.Fatalf("create over a held key = %+v, want a conflict", r)
	}
	if r := m.Apply(7, renew("h", byToken(5), 3000)); r.Status != fsm.StatusRenewed {
		t.Fatalf("PEXPIRE on the hash = %+v, want renewed", r)
	}
	l, _ := m.Get([]byte("h"))
	if l.Type() != fsm.TypeHash || l.Value.Rev != 5 || l.LeaseRev != 7 {
		t.Fatalf("hash after its renewal = %+v, want rev 5 (a lease is not the value), lease rev 7", l)
	}
	r = m.Apply(8, write("h", hash("owner", "2"), byRev(5)))
	if r.Status != fsm.StatusWritten || r.Token != 5 || !r.Existed || r.LeaseRev != 7 || r.LeaseMs != 3000 {
		t.Fatalf("HINCRBY = %+v, want written with token 5 and the lease of entry 7 kept", r)
	}
	if r := m.Apply(9, write("h", hash("owner", "3"), byRev(5))); r.Status != fsm.StatusConflict {
		t.Fatalf("write under a stale rev = %+v, want a conflict", r)
	}

	l, _ = m.Get([]byte("h"))
	if v, _ := l.Value.HashGet([]byte("owner")); string(v) != "2" || l.Value.Rev != 8 {
		t.Fatalf("hash = %+v, want owner=2 at rev 8", l.Value)
	}
	persist := write("h", hash("owner", "2"), byRev(8))
	persist.KeepLease = false
	if r := m.Apply(10, persist); r.Status != fsm.StatusWritten || r.Token != 5 || r.LeaseMs != 0 || r.LeaseRev != 10 {
		t.Fatalf("PERSIST = %+v, want written with token 5 and no lease", r)
	}
	if r := m.Apply(10, write("h", nil, byRev(10))); r.Status != fsm.StatusWritten || !r.Existed || r.LeaseMs != 0 {
		t.Fatalf("delete = %+v, want written, existed, no lease", r)
	}
	if _, held := m.Get([]byte("h")); held || m.Len() != 1 {
		t.Fatalf("the emptied hash is still there (%d keys)", m.Len())
	}
	// A SET over a collection is a new holder, even of an empty value.
	m.Apply(11, write("h", hash("a", "b"), matchAbsent))
	if r := m.Apply(12, grant("h", "", 0, matchAny)); r.Status != fsm.StatusGranted || r.Token != 12 {
		t.Fatalf("SET over a hash = %+v, want a new token", r)
	}
	if l, _ := m.Get([]byte("h")); l.Type() != fsm.TypeString {
		t.Fatalf("after SET the key is a %s", l.Type())
	}
}

// TestWriteStoresItsOwnBytes: a decoded command's value aliases the log entry, which raft
// reuses; the table must not.
func TestWriteStoresItsOwnBytes(t *testing.T) {
	enc := encode(write("h", hash("f", "v"), matchAbsent))
	cmds, err := fsm.DecodeEntry(nil, enc)
	if err != nil {
		t.Fatal(err)
	}
	m := fsm.New()
	m.ApplyEntry(nil, 1, cmds)
	for i := range enc {
		enc[i] = 'X'
	}
	l, _ := m.Get([]byte("h"))
	if v, ok := l.Value.HashGet([]byte("f")); !ok || string(v) != "v" {
		t.Fatalf("stored hash changed with the log buffer: %q", l.Value.Elems)
	}
}

// TestWriteAtomic: a Write whose guard fails aborts its entry, and everything before it in the
// entry is put back, collections included.
func TestWriteAtomic(t *testing.T) {
	m := fsm.New()
	m.Apply(1, write("a", hash("n", "1"), matchAbsent))
	before := snapshotBytes(t, m)
	res := m.ApplyEntry(nil, 2, []fsm.Command{
		write("a", hash("n", "2"), byRev(1)),
		write("b", hash("n", "1"), matchAbsent),
		write("a", nil, byRev(99)),
	})
	if res[2].Status != fsm.StatusConflict || res[0].Status != fsm.StatusAborted || res[1].Status != fsm.StatusAborted {
		t.Fatalf("results = %+v, want aborted, aborted, conflict", res)
	}
	m2 := restore(t, before)
	m2.Advance(2)
	if diff := diffTables(table(m), table(m2)); diff != "" {
		t.Fatalf("table after the aborted entry (-got +before):\n%s", diff)
	}
	if m.LastToken() != 1 {
		t.Fatalf("token counter = %d after an aborted entry, want 1", m.LastToken())
	}
}

// TestSnapshotCollections: every type survives a snapshot with its order, scores, rev, token
// and lease.
func TestSnapshotCollections(t *testing.T) {
	m := fsm.New()
	m.Apply(1, write("h", hash("f2", "v2", "f1", "v1"), matchAbsent))
	m.Apply(2, write("s", &fsm.Collection{Type: fsm.TypeSet, Elems: [][]byte{[]byte("b"), []byte("a")}}, matchAbsent))
	m.Apply(3, write("z", &fsm.Collection{Type: fsm.TypeZSet, Elems: [][]byte{[]byte("x"), []byte("y")}, Scores: []float64{-1.25, 7}}, matchAbsent))
	m.Apply(4, write("l", &fsm.Collection{Type: fsm.TypeList, Elems: [][]byte{[]byte("1"), []byte("1")}}, matchAbsent))
	m.Apply(5, renew("z", byToken(3), 9000))
	m.Apply(6, grant("str", "v", 0, matchAny))
	r := restore(t, snapshotBytes(t, m))
	if diff := cmp.Diff(table(r), table(m), equateEmpty); diff != "" {
		t.Fatalf("restored table (-got +want):\n%s", diff)
	}
	if got, want := snapshotBytes(t, r), snapshotBytes(t, m); !bytes.Equal(got, want) {
		t.Fatalf("a restored table snapshots differently")
	}
}

func TestWriteRejectsMalformedValues(t *testing.T) {
	for _, v := range []*fsm.Collection{
		{Type: fsm.TypeHash},
		{Type: fsm.TypeHash, Elems: [][]byte{[]byte("odd")}},
		{Type: fsm.TypeString, Elems: [][]byte{[]byte("x")}},
		{Type: 9, Elems: [][]byte{[]byte("x")}},
		{Type: fsm.TypeZSet, Elems: [][]byte{[]byte("x")}},
		{Type: fsm.TypeSet, Elems: [][]byte{[]byte("x")}, Scores: []float64{1}},
	} {
		c := write("k", v, matchAny)
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", v)
		}
	}
	if err := write("k", nil, byToken(1)).Validate(); err == nil {
		t.Errorf("a write guarded by a token validated")
	}
	// A corrupt element count is refused without allocating for it.
	b := encode(write("h", hash("f", "v"), matchAbsent))
	bad := append(bytes.Clone(b[:len(b)-7]), 1, 0xff, 0xff, 0xff, 0xff, 0x0f)
	if _, err := fsm.DecodeEntry(nil, bad); !errors.Is(err, fsm.ErrCorrupt) {
		t.Errorf("DecodeEntry(huge count) error = %v, want ErrCorrupt", err)
	}
}

// TestResultEnded: a command's result names the lock (a key without a typed value) it ended,
// for the lost-lock notices: deleted, replaced by a typed value, given to another holder,
// released or expired; nothing when the same holder sets it again or a collection changes.
func TestResultEnded(t *testing.T) {
	m := fsm.New()
	applyAll(t, m, 1, []fsm.Command{grant("a", "o1", 0, matchAny), grant("b", "o1", 0, matchAny), grant("c", "o1", 0, matchAny)})
	for _, c := range []struct {
		name  string
		index uint64
		cmd   fsm.Command
		want  fsm.Token
	}{
		{"the same holder again", 4, grant("a", "o1", 0, matchAny), 0},
		{"another holder", 5, grant("a", "o2", 0, matchAny), 1},
		{"deleted", 6, fsm.Command{Kind: fsm.KindWrite, Key: []byte("b"), Match: matchAny}, 2},
		{"replaced by a hash", 7, write("c", hash("f", "v"), matchAny), 3},
		{"a hash changed", 8, write("c", hash("f", "w"), matchAny), 0},
		{"a hash deleted", 9, fsm.Command{Kind: fsm.KindWrite, Key: []byte("c"), Match: matchAny}, 0},
		{"released", 10, release("a", matchAny), 5},
		{"a free key released", 11, release("a", matchAny), 0},
	} {
		if got := m.Apply(c.index, c.cmd); got.Ended != c.want {
			t.Errorf("%s: Ended %d (%+v); want %d", c.name, got.Ended, got, c.want)
		}
	}
}
