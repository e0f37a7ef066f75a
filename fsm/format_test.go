package fsm_test

import (
	"errors"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// In FormatKeyed (v0.1.0's format) an entry of string commands is a version 3 entry, which
// DecodeEntry (and that release) reads back as the same commands; a command only the current
// format carries is refused, not silently cut down.
func TestEncodeEntryInPreviousFormat(t *testing.T) {
	cmds := []fsm.Command{grant("a", "o", 5000, matchAny), {Kind: fsm.KindRelease, Key: []byte("\x00b"),
		Match: fsm.Match{Kind: fsm.MatchToken, Token: 7}}}
	b, err := fsm.EncodeEntryIn(nil, cmds, fsm.FormatKeyed)
	if err != nil {
		t.Fatal(err)
	}
	if fsm.FormatOf(b) != fsm.FormatKeyed {
		t.Fatalf("entry version %d, want %d", fsm.FormatOf(b), fsm.FormatKeyed)
	}
	got, err := fsm.DecodeEntry(nil, b)
	if err != nil || len(got) != 2 || string(got[0].Owner) != "o" || got[1].Match.Token != 7 {
		t.Fatalf("DecodeEntry = %+v, %v", got, err)
	}
	for _, f := range []byte{fsm.FormatTyped, fsm.FormatBatch} {
		// A request's own entry is entryVersion in both: FormatBatch adds the batch around it.
		if b, _ := fsm.EncodeEntryIn(nil, cmds, f); fsm.FormatOf(b) != fsm.FormatTyped {
			t.Fatalf("format %d: a request's entry version %d, want %d", f, fsm.FormatOf(b), fsm.FormatTyped)
		}
	}
	newer := [][]fsm.Command{
		{{Kind: fsm.KindWrite, Key: []byte("h"), Match: fsm.Match{Kind: fsm.MatchAbsent},
			Value: &fsm.Collection{Type: fsm.TypeHash, Elems: [][]byte{[]byte("f"), []byte("v")}}}},
		{{Kind: fsm.KindSetUser, Key: []byte("alice"), Owner: []byte("on")}},
		{{Kind: fsm.KindSetCluster, Key: []byte("c"), Match: fsm.Match{Kind: fsm.MatchAbsent}}},
		{grant("a", "o", 0, fsm.Match{Kind: fsm.MatchRev, Rev: 3})},
	}
	for _, c := range newer {
		if fsm.NeedsFormat(c) != fsm.FormatTyped {
			t.Errorf("NeedsFormat(%v) = %d, want %d", c[0].Kind, fsm.NeedsFormat(c), fsm.FormatTyped)
		}
		if _, err := fsm.EncodeEntryIn(nil, c, fsm.FormatKeyed); !errors.Is(err, fsm.ErrNeedsFormat) {
			t.Errorf("EncodeEntryIn(%v, previous) = %v, want ErrNeedsFormat", c[0].Kind, err)
		}
	}
}

// A table still in the previous format snapshots as version 3, which restores in that format;
// once the cluster switched, as version 5, which restores in FormatTyped.
func TestSnapshotFollowsFormat(t *testing.T) {
	m := fsm.New()
	applyAll(t, m, 1, []fsm.Command{grant("a", "oa", 5000, matchAny)})
	if m.Format() != fsm.FormatKeyed {
		t.Fatalf("a new table's format = %d, want FormatKeyed", m.Format())
	}
	b := snapshotBytes(t, m)
	if b[4] != 3 {
		t.Fatalf("snapshot version %d in the previous format, want 3", b[4])
	}
	if r := restore(t, b); r.Format() != fsm.FormatKeyed || r.Len() != 1 {
		t.Fatalf("restored: format %d, %d keys", r.Format(), r.Len())
	}
	m.NoteFormat(fsm.FormatBatch)
	b = snapshotBytes(t, m)
	if b[4] != 5 {
		t.Fatalf("snapshot version %d in FormatBatch, want 5", b[4])
	}
	// A snapshot does not say whether the cluster had switched to batches: a restored table
	// says FormatTyped, which every member of such a cluster reads, and the leader switches again.
	if r := restore(t, b); r.Format() != fsm.FormatTyped {
		t.Fatalf("restored format %d, want %d", r.Format(), fsm.FormatTyped)
	}
	// FormatFunctions snapshots carry the libraries, and say so.
	m.NoteFormat(fsm.FormatCurrent)
	b = snapshotBytes(t, m)
	if b[4] != 8 {
		t.Fatalf("snapshot version %d in the current format, want 8", b[4])
	}
	if r := restore(t, b); r.Format() != fsm.FormatFunctions {
		t.Fatalf("restored format %d, want %d", r.Format(), fsm.FormatFunctions)
	}
	m.NoteFormat(fsm.FormatKeyed) // never back
	if m.Format() != fsm.FormatCurrent {
		t.Fatalf("format went back to %d", m.Format())
	}
}

// A batch carries several requests' entries; DecodeEntries gives each request's commands, in
// order, and DecodeEntry (one request) refuses a batch rather than merge its requests.
func TestBatchEntries(t *testing.T) {
	reqs := [][]fsm.Command{
		{grant("a", "oa", 5000, matchAny)},
		{{Kind: fsm.KindRelease, Key: []byte("\x00b"), Match: fsm.Match{Kind: fsm.MatchToken, Token: 7}},
			grant("c", "oc", 0, matchAny)},
		{{Kind: fsm.KindWrite, Key: []byte("\x00h"), Match: fsm.Match{Kind: fsm.MatchAbsent},
			Value: &fsm.Collection{Type: fsm.TypeHash, Elems: [][]byte{[]byte("f"), []byte("v")}}}},
	}
	var entries [][]byte
	for _, r := range reqs {
		entries = append(entries, fsm.EncodeEntry(nil, r))
	}
	b := fsm.AppendBatch(nil, entries)
	if fsm.FormatOf(b) != fsm.FormatBatch {
		t.Fatalf("batch version %d, want %d", fsm.FormatOf(b), fsm.FormatBatch)
	}
	cmds, ends, err := fsm.DecodeEntries(nil, nil, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(ends) != 3 || ends[0] != 1 || ends[1] != 3 || ends[2] != 4 {
		t.Fatalf("ends = %v, want [1 3 4]", ends)
	}
	if string(cmds[0].Owner) != "oa" || cmds[1].Match.Token != 7 || string(cmds[2].Owner) != "oc" || cmds[3].Value == nil {
		t.Fatalf("commands = %+v", cmds)
	}
	if _, err := fsm.DecodeEntry(nil, b); !errors.Is(err, fsm.ErrCorrupt) {
		t.Fatalf("DecodeEntry(batch) error = %v, want ErrCorrupt", err)
	}
	// One request's entry decodes as a batch of one.
	if cmds, ends, err := fsm.DecodeEntries(nil, nil, entries[1]); err != nil || len(cmds) != 2 || len(ends) != 1 || ends[0] != 2 {
		t.Fatalf("DecodeEntries(one entry) = %d commands, ends %v, %v", len(cmds), ends, err)
	}
	// A batch cut short, one of no requests, or a request of no commands is corrupt as a whole.
	for name, bad := range map[string][]byte{
		"cut":           b[:len(b)-3],
		"no requests":   {5, 0},
		"empty request": append([]byte{5, 2}, append(entries[0][1:], 0)...),
		"trailing":      append(append([]byte(nil), b...), 0),
	} {
		if got, ends, err := fsm.DecodeEntries(nil, nil, bad); !errors.Is(err, fsm.ErrCorrupt) || got != nil || ends != nil {
			t.Errorf("%s: DecodeEntries = %d commands, %v, %v; want ErrCorrupt and nothing", name, len(got), ends, err)
		}
	}
}
