package fsm_test

import (
	"errors"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// In the previous release's format an entry of string commands is a version 3 entry, which
// DecodeEntry (and that release) reads back as the same commands; a command only the current
// format carries is refused, not silently cut down.
func TestEncodeEntryInPreviousFormat(t *testing.T) {
	cmds := []fsm.Command{grant("a", "o", 5000, matchAny), {Kind: fsm.KindRelease, Key: []byte("\x00b"),
		Match: fsm.Match{Kind: fsm.MatchToken, Token: 7}}}
	b, err := fsm.EncodeEntryIn(nil, cmds, fsm.FormatPrevious)
	if err != nil {
		t.Fatal(err)
	}
	if fsm.FormatOf(b) != fsm.FormatPrevious {
		t.Fatalf("entry version %d, want %d", fsm.FormatOf(b), fsm.FormatPrevious)
	}
	got, err := fsm.DecodeEntry(nil, b)
	if err != nil || len(got) != 2 || string(got[0].Owner) != "o" || got[1].Match.Token != 7 {
		t.Fatalf("DecodeEntry = %+v, %v", got, err)
	}
	if b, _ := fsm.EncodeEntryIn(nil, cmds, fsm.FormatCurrent); fsm.FormatOf(b) != fsm.FormatCurrent {
		t.Fatalf("current format entry version %d", fsm.FormatOf(b))
	}
	newer := [][]fsm.Command{
		{{Kind: fsm.KindWrite, Key: []byte("h"), Match: fsm.Match{Kind: fsm.MatchAbsent},
			Value: &fsm.Collection{Type: fsm.TypeHash, Elems: [][]byte{[]byte("f"), []byte("v")}}}},
		{{Kind: fsm.KindSetUser, Key: []byte("alice"), Owner: []byte("on")}},
		{{Kind: fsm.KindSetCluster, Key: []byte("c"), Match: fsm.Match{Kind: fsm.MatchAbsent}}},
		{grant("a", "o", 0, fsm.Match{Kind: fsm.MatchRev, Rev: 3})},
	}
	for _, c := range newer {
		if fsm.NeedsFormat(c) != fsm.FormatCurrent {
			t.Errorf("NeedsFormat(%v) = %d, want current", c[0].Kind, fsm.NeedsFormat(c))
		}
		if _, err := fsm.EncodeEntryIn(nil, c, fsm.FormatPrevious); !errors.Is(err, fsm.ErrNeedsFormat) {
			t.Errorf("EncodeEntryIn(%v, previous) = %v, want ErrNeedsFormat", c[0].Kind, err)
		}
	}
}

// A table still in the previous format snapshots as version 3, which restores in that format;
// once the cluster switched, as version 5, which restores in the current one.
func TestSnapshotFollowsFormat(t *testing.T) {
	m := fsm.New()
	applyAll(t, m, 1, []fsm.Command{grant("a", "oa", 5000, matchAny)})
	if m.Format() != fsm.FormatPrevious {
		t.Fatalf("a new table's format = %d, want the previous release's", m.Format())
	}
	b := snapshotBytes(t, m)
	if b[4] != 3 {
		t.Fatalf("snapshot version %d in the previous format, want 3", b[4])
	}
	if r := restore(t, b); r.Format() != fsm.FormatPrevious || r.Len() != 1 {
		t.Fatalf("restored: format %d, %d keys", r.Format(), r.Len())
	}
	m.NoteFormat(fsm.FormatCurrent)
	b = snapshotBytes(t, m)
	if b[4] != 5 {
		t.Fatalf("snapshot version %d in the current format, want 5", b[4])
	}
	if r := restore(t, b); r.Format() != fsm.FormatCurrent {
		t.Fatalf("restored format %d, want current", r.Format())
	}
	m.NoteFormat(fsm.FormatPrevious) // never back
	if m.Format() != fsm.FormatCurrent {
		t.Fatalf("format went back to %d", m.Format())
	}
}
