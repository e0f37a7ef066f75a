package raftnode

import (
	"bytes"
	"io"
	"testing"
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
