package fsm_test

import (
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// WithLeases replaces the lease of every leased lock, and only theirs, in a copy: the snapshot
// it came from and the machine keep theirs.
func TestSnapshotWithLeases(t *testing.T) {
	m := fsm.New()
	applyAll(t, m, 1, []fsm.Command{
		grant("a", "alice", 10000, matchAbsent),
		grant("b", "bob", 0, matchAbsent),
		grant("c", "carol", 500, matchAbsent),
	})
	orig := m.Snapshot()
	left := map[string]uint64{"a": 4000, "c": 0} // 0: a lease that ran out keeps 1 ms
	got := orig.WithLeases(func(key string, l fsm.Lock) uint64 {
		if _, ok := left[key]; !ok {
			t.Errorf("lease asked for %q, which has no lease", key)
		}
		return left[key]
	})
	want := map[string]fsm.Lock{"a": lock("alice", 1, 1, 4000), "b": lock("bob", 2, 2, 0), "c": lock("carol", 3, 3, 1)}
	if d := diffTables(table(restore(t, writeSnapshot(t, got))), want); d != "" {
		t.Errorf("WithLeases table (-got +want):\n%s", d)
	}
	wantOrig := map[string]fsm.Lock{"a": lock("alice", 1, 1, 10000), "b": lock("bob", 2, 2, 0), "c": lock("carol", 3, 3, 500)}
	if d := diffTables(table(restore(t, writeSnapshot(t, orig))), wantOrig); d != "" {
		t.Errorf("the original snapshot changed (-got +want):\n%s", d)
	}
	if d := diffTables(table(m), wantOrig); d != "" {
		t.Errorf("the machine changed (-got +want):\n%s", d)
	}
	if got.Applied() != 3 || got.LastToken() != 3 {
		t.Errorf("WithLeases: applied %d, last token %d; want 3, 3", got.Applied(), got.LastToken())
	}
}

// WithoutMembers empties the member table, cluster ID included, and keeps everything else.
func TestSnapshotWithoutMembers(t *testing.T) {
	m := fsm.New()
	applyAll(t, m, 1, []fsm.Command{
		{Kind: fsm.KindSetCluster, Key: []byte("c0ffee")},
		{Kind: fsm.KindSetMember, Key: []byte("n1"), Owner: []byte("127.0.0.1:6379")},
		grant("a", "alice", 10000, matchAbsent),
	})
	snap := m.Snapshot()
	if snap.ClusterID() != "c0ffee" {
		t.Fatalf("ClusterID = %q, want c0ffee", snap.ClusterID())
	}
	r := restore(t, writeSnapshot(t, snap.WithoutMembers()))
	if r.ClusterID() != "" || r.MemberCount() != 0 {
		t.Errorf("after WithoutMembers: cluster %q, %d members; want none", r.ClusterID(), r.MemberCount())
	}
	if d := diffTables(table(r), table(m)); d != "" || r.LastToken() != m.LastToken() || r.Applied() != m.Applied() {
		t.Errorf("table changed (-got +want):\n%s\nlast token %d (want %d), applied %d (want %d)", d, r.LastToken(), m.LastToken(), r.Applied(), m.Applied())
	}
	if m.ClusterID() != "c0ffee" || m.MemberCount() != 1 {
		t.Errorf("the machine lost its members: cluster %q, %d members", m.ClusterID(), m.MemberCount())
	}
}
