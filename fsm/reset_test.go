package fsm_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// TestReset: a reset machine is a new one (the same snapshot, the same results for the same
// commands after), and what was read from it before the reset still reads the same.
func TestReset(t *testing.T) {
	fill := []fsm.Command{
		grant("\x00a", "alice", 5000, matchAny),
		grant("\x03b", "bob", 0, matchAny),
		write("\x00h", hash("f", "v", "g", "w"), matchAbsent),
		{Kind: fsm.KindStoreScript, Key: []byte("0123456789012345678901234567890123456789"), Owner: []byte("return 1")},
		{Kind: fsm.KindSetMember, Key: []byte("n1"), Owner: []byte("127.0.0.1:6379")},
		{Kind: fsm.KindSetUser, Key: []byte("carol"), Owner: []byte("on")},
		{Kind: fsm.KindSetCluster, Key: []byte("cluster"), Owner: []byte("c-1")},
		grant("\xffz", "zed", 100, matchAny), // a first byte past the databases
	}
	m := fsm.New()
	m.SetLeaseClock(12345)
	applyAll(t, m, 7, fill)

	lockBefore, _ := m.Get([]byte("\x00a"))
	hashBefore, _ := m.Get([]byte("\x00h"))
	owner := bytes.Clone(lockBefore.Owner)
	elems := slices.Clone(hashBefore.Value.Elems)

	m.Reset()

	if got, want := snapshotBytes(t, m), snapshotBytes(t, fsm.New()); !bytes.Equal(got, want) {
		t.Fatalf("a reset machine's snapshot differs from a new one's:\n got %q\nwant %q", got, want)
	}
	if m.Len() != 0 || m.Leases() != 0 || m.LenDB(0) != 0 || m.LenDB(0xff) != 0 || m.LastToken() != 0 ||
		m.Applied() != 0 || m.Format() != fsm.New().Format() || m.Scripts() != 0 || len(m.Users()) != 0 || m.MemberCount() != 0 {
		t.Fatalf("reset left state: len %d leases %d db0 %d db255 %d token %d applied %d format %d scripts %d users %d members %d",
			m.Len(), m.Leases(), m.LenDB(0), m.LenDB(0xff), m.LastToken(), m.Applied(), m.Format(), m.Scripts(), len(m.Users()), m.MemberCount())
	}
	if !bytes.Equal(lockBefore.Owner, owner) || !slices.EqualFunc(hashBefore.Value.Elems, elems, bytes.Equal) {
		t.Fatalf("what was read before the reset changed: owner %q (was %q), hash %q (was %q)", lockBefore.Owner, owner, hashBefore.Value.Elems, elems)
	}

	// The same commands give the same results and state on the reset machine as on a new one.
	fresh := fsm.New()
	for _, mm := range []*fsm.Machine{m, fresh} {
		mm.SetLeaseClock(999)
	}
	for i, c := range append(fill, release("\x00a", matchAny), write("\x00h", hash("x", "y"), matchAbsent)) {
		got, want := m.Apply(uint64(20+i), c), fresh.Apply(uint64(20+i), c)
		if d := cmpResults(got, want); d != "" {
			t.Fatalf("command %d (%v) after the reset: %s", i, c.Kind, d)
		}
	}
	if got, want := snapshotBytes(t, m), snapshotBytes(t, fresh); !bytes.Equal(got, want) {
		t.Fatalf("after the same commands, the reset machine's snapshot differs from a new one's")
	}
}
