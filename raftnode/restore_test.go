package raftnode

import (
	"bytes"
	"io"
	"testing"

	"github.com/raftlock/raftlock/tests/testutil"
)

// TestRestoreRefusesAnOlderSnapshot: a snapshot that ends before what the table applied (a stale
// install, which hashicorp/raft would take) is refused and leaves the table as it was; one at the
// table's own index restores.
func TestRestoreRefusesAnOlderSnapshot(t *testing.T) {
	n := newNode(t)
	mustLock(t, n, "first", "a", 60_000)
	var older bytes.Buffer
	if err := n.TableDump(&older); err != nil {
		t.Fatal(err)
	}
	mustLock(t, n, "second", "b", 60_000)
	before := table(t, n)

	err := machineFSM{n.Replica}.Restore(io.NopCloser(bytes.NewReader(older.Bytes())))
	if err == nil {
		t.Fatal("Restore of a snapshot older than the applied table: no error")
	}
	if d := diffTables(table(t, n), before); d != "" {
		t.Fatalf("the refused snapshot changed the table (-want +got):\n%s", d)
	}

	var current bytes.Buffer
	if err := n.TableDump(&current); err != nil {
		t.Fatal(err)
	}
	if err := (machineFSM{n.Replica}).Restore(io.NopCloser(bytes.NewReader(current.Bytes()))); err != nil {
		t.Fatalf("Restore of the table's own snapshot: %v", err)
	}
	if !held(n, "second") {
		t.Fatal("second not held after restoring the table's own snapshot")
	}
}

// TestRestoreTakesAnOlderSnapshotBeforeACommit: a node whose applied entries no leader has
// confirmed since it started (raft's commit index is 0 after a restart) takes an older snapshot:
// a survivor of an offline recovery may hold entries that never committed, and the snapshot of
// the leader it then follows must replace them.
func TestRestoreTakesAnOlderSnapshotBeforeACommit(t *testing.T) {
	nodes := newCluster(t, 3)
	l := testutil.Leader(t, nodes)
	f := testutil.Others(l, nodes)[0]
	mustLock(t, l, "first", "a", 60_000)
	waitConverged(t, l, nodes)
	var older bytes.Buffer
	if err := f.TableDump(&older); err != nil {
		t.Fatal(err)
	}
	mustLock(t, l, "second", "b", 60_000)
	waitConverged(t, l, nodes)
	if err := f.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	testutil.Isolate(f, nodes) // no hand-off from the others' Close reaches it
	for _, n := range testutil.Others(f, nodes) {
		closeNode(t, n)
	}
	f = restart(t, f) // alone of three: no leader, nothing confirmed
	if !held(f, "second") {
		t.Fatal("second not held after the restart from the follower's snapshot")
	}
	if c := f.raft.CommitIndex(); c != 0 {
		t.Fatalf("commit index %d after a restart without a leader, want 0", c)
	}
	if err := (machineFSM{f.Replica}).Restore(io.NopCloser(bytes.NewReader(older.Bytes()))); err != nil {
		t.Fatalf("Restore of an older snapshot before any commit: %v", err)
	}
	if held(f, "second") || !held(f, "first") {
		t.Fatalf("after the older snapshot: first held %v, second held %v; want true, false", held(f, "first"), held(f, "second"))
	}
}
