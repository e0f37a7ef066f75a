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
	if diff := cmp.Diff(dumpTable(m), legacyTable(string(readGolden(t, goldenTable)))); diff != "" {
		t.Errorf("table after the v1 log (-got +want):\n%s", diff)
	}
	checkNextTokens(t, m)
}

// checkNextTokens checks that a machine holding the golden table (applied index 27, tokens up
// to 25, some tokens of released locks up to 23) hands out tokens above every old one, two of
// them in one entry: 28 and 29 at index 28, the entry's index being the floor.
func checkNextTokens(t *testing.T, m *fsm.Machine) {
	t.Helper()
	if got := m.LastToken(); got < 25 || got > 27 {
		t.Errorf("LastToken() = %d, want from 25 (the largest held) to 27 (the applied index)", got)
	}
	res := m.ApplyEntry(nil, 28, []fsm.Command{grant("new1", "o", 0, matchAbsent), grant("new2", "o", 0, matchAbsent)})
	if res[0].Token != 28 || res[1].Token != 29 || res[0].LeaseRev != 28 || res[1].LeaseRev != 28 {
		t.Errorf("two grants at index 28 after the golden log: %+v, want tokens 28 and 29, lease revs 28", res)
	}
}

// TestGoldenV1Snapshots restores the snapshots an older binary wrote: the last one holds the
// final table; the one from the middle of the log, with the rest of the log replayed, too.
func TestGoldenV1Snapshots(t *testing.T) {
	want := legacyTable(string(readGolden(t, goldenTable)))
	last := restore(t, readGolden(t, goldenSnapLast))
	if diff := cmp.Diff(dumpTable(last), want); diff != "" {
		t.Errorf("table restored from the last v1 snapshot (-got +want):\n%s", diff)
	}
	if got := last.LastToken(); got != 27 {
		t.Errorf("LastToken() after the v1 snapshot at 27 = %d, want 27: above every token held and the applied index", got)
	}
	// Written again, it is a version 2 snapshot that keeps the counter.
	again := restore(t, snapshotBytes(t, last))
	if diff := cmp.Diff(dumpTable(again), want); diff != "" || again.LastToken() != 27 {
		t.Errorf("v1 snapshot written as v2 and restored: LastToken %d, table (-got +want):\n%s", again.LastToken(), diff)
	}
	checkNextTokens(t, last)
	mid := restore(t, readGolden(t, goldenSnapMid))
	if got := mid.Applied(); got != goldenMidIndex {
		t.Fatalf("mid snapshot Applied() = %d, want %d", got, goldenMidIndex)
	}
	replayGolden(t, mid, readGoldenLog(t), goldenMidIndex)
	if diff := cmp.Diff(dumpTable(mid), want); diff != "" {
		t.Errorf("table from the mid v1 snapshot and the rest of the log (-got +want):\n%s", diff)
	}
	checkNextTokens(t, mid)
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
		cmds, err := fsm.DecodeEntry(nil, e.data)
		if err != nil {
			t.Fatalf("entry %d (%x) does not decode: %v", e.index, e.data, err)
		}
		if len(cmds) != 1 {
			t.Fatalf("entry %d (%x) decodes to %d commands, want 1", e.index, e.data, len(cmds))
		}
		got := m.ApplyEntry(nil, e.index, cmds)
		got[0].Ended = 0 // computed on apply since, not in the results the older binary recorded
		if diff := cmpResults(got[0], e.result); diff != "" {
			t.Errorf("entry %d (%s) result (-got +want):\n%s", e.index, cmds[0].Kind, diff)
		}
	}
}
