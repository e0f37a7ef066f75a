package server

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
)

// The reader's copies share chunks, yet each command is a copy of its own: equal to what was
// read, unchanged by the reader's buffer being reused, by its own table keys being made, or by
// appends to its neighbours; small commands cost a fraction of an allocation each, a large one
// gets memory of its own.
func TestArgArenaCopiesAreDisjoint(t *testing.T) {
	var a argArena
	set := lookupCommand([]byte("set"))
	read := make([][]byte, 0, 3) // the reader's buffer, reused for every command
	var want [][][]byte
	var got [][][]byte
	for i := range 500 {
		read = read[:0]
		read = append(read, []byte("SET"), fmt.Appendf(nil, "key:%d", i), bytes.Repeat([]byte{'v'}, i%40))
		if i == 250 {
			read[2] = bytes.Repeat([]byte{'V'}, 10000) // larger than a chunk: alone
		}
		want = append(want, [][]byte{bytes.Clone(read[0]), bytes.Clone(read[1]), bytes.Clone(read[2])})
		c := a.copy(read, 4096)
		for _, arg := range read {
			for j := range arg {
				arg[j] ^= 0xff // the reader's buffer is overwritten by the next read
			}
		}
		got = append(got, c)
	}
	for i, c := range got {
		tk := withDBKeys(set, c, i%16)
		if string(tk[1]) != string([]byte{byte(i % 16)})+string(want[i][1]) {
			t.Fatalf("command %d: table key %q", i, tk[1])
		}
		c[2] = append(c[2], "appended"...) // must not reach the next command's bytes
		_ = append(c, []byte("extra"))     // nor its list
	}
	for i, c := range got {
		if !slices.EqualFunc(c[:2], want[i][:2], bytes.Equal) || !bytes.HasPrefix(c[2], want[i][2]) {
			t.Fatalf("command %d became %q, want %q", i, c, want[i])
		}
	}

	small := [][]byte{[]byte("LOCK"), []byte("k"), []byte("5000")}
	if n := testing.AllocsPerRun(1000, func() { a.copy(small, 1000) }); n > 0.1 {
		t.Errorf("a small command's copy with more buffered: %v allocations, want a fraction of one", n)
	}
	// The last command the reader holds: copied into the chunk, which the arena then lets go.
	last := a.copy(small, 0)
	if a.bytes != nil || a.lists != nil {
		t.Errorf("the arena keeps a chunk after the last buffered command")
	}
	if !slices.EqualFunc(last, small, bytes.Equal) {
		t.Errorf("last command %q, want %q", last, small)
	}
	// Alone on the wire, a command gets memory sized for itself: two allocations, as
	// before the arena, not two chunks.
	if n := testing.AllocsPerRun(100, func() { a.copy(small, 0) }); n != 2 {
		t.Errorf("a lone command's copy: %v allocations, want 2", n)
	}
}
