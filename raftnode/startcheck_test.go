package raftnode

import (
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// TestStartRefusesALogWithMissingEntries: stores that lost entries raft needs at start (a
// dropped sync, a log restored apart from its snapshots) make New fail with an error rather
// than panic inside raft.NewRaft, whether the gap lies before the log's first entry or inside.
func TestStartRefusesALogWithMissingEntries(t *testing.T) {
	for _, tc := range []struct {
		name    string
		indexes []uint64
		want    string
	}{
		{"gap after the snapshot", []uint64{10, 11, 12}, "entries 1-9 are missing"},
		{"hole inside the log", []uint64{1, 2, 4, 5}, "could not read its stores at start"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStores()
			var logs []*raft.Log
			for _, i := range tc.indexes {
				logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogNoop})
			}
			if err := st.Log.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
			_, trans := raft.NewInmemTransport(raft.ServerAddress(addrOf("n1")))
			defer trans.Close()
			n, err := New(withLocks(testConfig("n1")), st, trans)
			if err == nil {
				n.Close()
				t.Fatalf("New started on a log of entries %v with no snapshot", tc.indexes)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	t.Run("a log that continues the snapshot starts", func(t *testing.T) {
		st := newStores()
		if err := st.Log.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogNoop}, {Index: 2, Term: 1, Type: raft.LogNoop}}); err != nil {
			t.Fatal(err)
		}
		startNode(t, testConfig("n1"), st)
	})
}
