package fsm_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/raftlock/raftlock/fsm"
)

// TestGoldenV1Log replays the log an older binary wrote: every entry decodes, applies with the
// result it had then, and the table ends as it did then.
func TestGoldenV1Log(t *testing.T) {
	log := readGoldenLog(t)
	m := fsm.New()
	replayGolden(t, m, log, 0)
	if diff := cmp.Diff(dumpTable(m), string(readGolden(t, goldenTable))); diff != "" {
		t.Errorf("table after the v1 log (-got +want):\n%s", diff)
	}
}

// TestGoldenV1Snapshots restores the snapshots an older binary wrote: the last one holds the
// final table; the one from the middle of the log, with the rest of the log replayed, too.
func TestGoldenV1Snapshots(t *testing.T) {
	want := string(readGolden(t, goldenTable))
	last := restore(t, readGolden(t, goldenSnapLast))
	if diff := cmp.Diff(dumpTable(last), want); diff != "" {
		t.Errorf("table restored from the last v1 snapshot (-got +want):\n%s", diff)
	}
	mid := restore(t, readGolden(t, goldenSnapMid))
	if got := mid.Applied(); got != goldenMidIndex {
		t.Fatalf("mid snapshot Applied() = %d, want %d", got, goldenMidIndex)
	}
	replayGolden(t, mid, readGoldenLog(t), goldenMidIndex)
	if diff := cmp.Diff(dumpTable(mid), want); diff != "" {
		t.Errorf("table from the mid v1 snapshot and the rest of the log (-got +want):\n%s", diff)
	}
}

// replayGolden applies the golden log's entries after index from, checking each result.
func replayGolden(t *testing.T, m *fsm.Machine, log []goldenEntry, from uint64) {
	t.Helper()
	for _, e := range log {
		if e.index <= from {
			continue
		}
		if e.advance {
			m.Advance(e.index)
			continue
		}
		c, err := fsm.Decode(e.data)
		if err != nil {
			t.Fatalf("entry %d (%x) does not decode: %v", e.index, e.data, err)
		}
		got := m.Apply(e.index, c)
		if diff := cmpResults(got, e.result); diff != "" {
			t.Errorf("entry %d (%s) result (-got +want):\n%s", e.index, c.Kind, diff)
		}
	}
}
