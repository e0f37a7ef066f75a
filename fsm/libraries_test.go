package fsm_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

func storeLib(name, src string) fsm.Command {
	return fsm.Command{Kind: fsm.KindStoreLibrary, Key: []byte(name), Owner: []byte(src)}
}

// The library commands store, replace, delete and flush libraries; each result says whether
// there was one before, and a Libraries read before a change does not change.
func TestLibrariesApply(t *testing.T) {
	m := fsm.New()
	empty := m.Libraries()
	steps := []struct {
		cmd     fsm.Command
		existed bool
		names   []string
		bytes   int
	}{
		{storeLib("a", "src-a"), false, []string{"a"}, 5},
		{storeLib("b", "src-bb"), false, []string{"a", "b"}, 11},
		{storeLib("a", "a2"), true, []string{"a", "b"}, 8},
		{fsm.Command{Kind: fsm.KindDeleteLibrary, Key: []byte("a")}, true, []string{"b"}, 6},
		{fsm.Command{Kind: fsm.KindDeleteLibrary, Key: []byte("a")}, false, []string{"b"}, 6},
		{fsm.Command{Kind: fsm.KindFlushLibraries}, true, nil, 0},
		{fsm.Command{Kind: fsm.KindFlushLibraries}, false, nil, 0},
	}
	for i, s := range steps {
		before := m.Libraries()
		beforeNames := before.Names()
		if err := s.cmd.Validate(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		r := m.Apply(uint64(i+1), s.cmd)
		if r.Status != fsm.StatusLibrary || r.Existed != s.existed {
			t.Fatalf("step %d (%v): result %+v, want library existed=%v", i, s.cmd.Kind, r, s.existed)
		}
		if got := m.Libraries().Names(); !slices.Equal(got, s.names) && len(got)+len(s.names) > 0 {
			t.Fatalf("step %d: libraries %v, want %v", i, got, s.names)
		}
		if got := m.Libraries().Bytes(); got != s.bytes {
			t.Fatalf("step %d: %d bytes, want %d", i, got, s.bytes)
		}
		if got := before.Names(); !slices.Equal(got, beforeNames) {
			t.Fatalf("step %d: a Libraries read before the change changed: %v, was %v", i, got, beforeNames)
		}
	}
	if empty.Len() != 0 {
		t.Fatalf("the empty libraries changed: %d", empty.Len())
	}
	if err := (fsm.Command{Kind: fsm.KindStoreLibrary, Key: []byte("x")}).Validate(); err == nil {
		t.Fatal("a store-library without a source validated")
	}
	if err := (fsm.Command{Kind: fsm.KindDeleteLibrary}).Validate(); err == nil {
		t.Fatal("a delete-library without a name validated")
	}
}

// A library change in an entry whose guard fails is undone with the rest of it.
func TestLibrariesRollback(t *testing.T) {
	m := fsm.New()
	m.Apply(1, storeLib("a", "src-a"))
	res := m.ApplyEntry(nil, 2, []fsm.Command{
		{Kind: fsm.KindFlushLibraries},
		storeLib("b", "src-b"),
		{Kind: fsm.KindRelease, Key: []byte("\x00nokey"), Match: fsm.Match{Kind: fsm.MatchToken, Token: 9}},
	})
	if !fsm.Aborted(res) {
		t.Fatalf("results %+v, want the entry aborted", res)
	}
	if got := m.Libraries().Names(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("libraries after the rollback %v, want [a]", got)
	}
}

// Libraries travel in FormatFunctions snapshots (version 8) and come back byte for byte.
func TestLibrariesSnapshot(t *testing.T) {
	m := fsm.New()
	m.NoteFormat(fsm.FormatFunctions)
	applyAll(t, m, 1, []fsm.Command{grant("k", "v", 0, matchAny), storeLib("lib1", "#!lua name=lib1\nx"), storeLib("lib2", "#!lua name=lib2\ny")})
	b := snapshotBytes(t, m)
	if b[4] != 8 {
		t.Fatalf("snapshot version %d, want 8", b[4])
	}
	r := restore(t, b)
	if src, ok := r.Libraries().Get("lib2"); !ok || src != "#!lua name=lib2\ny" || r.Libraries().Len() != 2 {
		t.Fatalf("restored libraries %v, lib2 = %q", r.Libraries().Names(), src)
	}
	if r.Format() != fsm.FormatFunctions {
		t.Fatalf("restored format %d, want %d", r.Format(), fsm.FormatFunctions)
	}
	if b2 := snapshotBytes(t, r); string(b2) != string(b) {
		t.Fatal("the restored table's snapshot differs from the original's")
	}
	// A corrupt library (an empty source) is refused, not restored.
	bad := fsm.New()
	bad.NoteFormat(fsm.FormatFunctions)
	bad.Apply(1, storeLib("z", "s"))
	raw := snapshotBytes(t, bad)
	// The library is the last field before the checksum: 1 "z" 1 "s". Its source emptied,
	// with a checksum that matches:
	body := append(append([]byte(nil), raw[:len(raw)-6]...), 0)
	body = binary.BigEndian.AppendUint32(body, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	if _, err := fsm.Restore(bytes.NewReader(body)); !errors.Is(err, fsm.ErrCorrupt) {
		t.Fatalf("Restore of an empty library source = %v, want ErrCorrupt", err)
	}
}

// The library kinds need FormatFunctions: an older format cannot carry them, and the entry
// that switches a cluster to it says so by its version byte.
func TestLibrariesNeedFormatFunctions(t *testing.T) {
	for _, c := range []fsm.Command{storeLib("a", "s"), {Kind: fsm.KindDeleteLibrary, Key: []byte("a")}, {Kind: fsm.KindFlushLibraries}} {
		cmds := []fsm.Command{grant("k", "v", 0, matchAny), c}
		if got := fsm.NeedsFormat(cmds); got != fsm.FormatFunctions {
			t.Errorf("NeedsFormat(%v) = %d, want %d", c.Kind, got, fsm.FormatFunctions)
		}
		if _, err := fsm.EncodeEntryIn(nil, cmds, fsm.FormatKeyed); !errors.Is(err, fsm.ErrNeedsFormat) {
			t.Errorf("EncodeEntryIn(%v, FormatKeyed) = %v, want ErrNeedsFormat", c.Kind, err)
		}
	}
	if got := fsm.NeedsFormat([]fsm.Command{{Kind: fsm.KindForgetUser, Key: []byte("u")}, grant("k", "v", 0, fsm.Match{Kind: fsm.MatchRev, Rev: 1})}); got != fsm.FormatBatch {
		t.Errorf("NeedsFormat(forget-user, typed) = %d, want FormatBatch", got)
	}
	if fsm.FormatCurrent != fsm.FormatFunctions {
		t.Fatalf("FormatCurrent = %d, want FormatFunctions (%d)", fsm.FormatCurrent, fsm.FormatFunctions)
	}
	noop := fsm.EncodeEntry(nil, []fsm.Command{{Kind: fsm.KindNoop}})
	sw := fsm.AppendBatchIn(nil, [][]byte{noop, fsm.EncodeEntry(nil, []fsm.Command{storeLib("a", "s")})}, fsm.FormatFunctions)
	if fsm.FormatOf(sw) != fsm.FormatFunctions {
		t.Fatalf("a FormatFunctions batch has version %d", fsm.FormatOf(sw))
	}
	cmds, ends, err := fsm.DecodeEntries(nil, nil, sw)
	if err != nil || len(ends) != 2 || cmds[1].Kind != fsm.KindStoreLibrary {
		t.Fatalf("DecodeEntries(FormatFunctions batch) = %+v, %v, %v", cmds, ends, err)
	}
	if _, err := fsm.DecodeEntry(nil, sw); !errors.Is(err, fsm.ErrCorrupt) {
		t.Fatalf("DecodeEntry(FormatFunctions batch) = %v, want ErrCorrupt", err)
	}
	m := fsm.New()
	m.NoteFormat(fsm.FormatOf(sw))
	if m.Format() != fsm.FormatFunctions {
		t.Fatalf("format after the switch entry %d", m.Format())
	}
}
