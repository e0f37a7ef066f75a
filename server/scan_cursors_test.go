package server

import "testing"

// TestCursorPutBackIsNotEvictedEarly: a cursor taken by a SCAN that then failed is put back as
// the newest; the place it had before must not evict it when that place comes to the front.
func TestCursorPutBackIsNotEvictedEarly(t *testing.T) {
	cs := newCursors()
	p := scanPosition{db: 3, from: []byte("\x03k")}
	id := cs.save(p)
	if _, ok := cs.take(id); !ok {
		t.Fatal("a cursor just saved is unknown")
	}
	for range maxCursors - 1 {
		cs.save(scanPosition{})
	}
	cs.put(id, p) // the SCAN that took it failed
	cs.save(scanPosition{})
	cs.save(scanPosition{})
	got, ok := cs.take(id)
	if !ok || got.db != 3 || string(got.from) != "\x03k" {
		t.Fatalf("the cursor put back = %+v, %v; want it, with its position", got, ok)
	}
	if n := cs.mu.next.len(); n > maxCursors {
		t.Fatalf("%d cursors remembered, more than %d", n, maxCursors)
	}
	for range 3 * maxCursors {
		cs.save(scanPosition{})
	}
	if n, o := cs.mu.next.len(), len(cs.mu.next.order)-cs.mu.next.head; n != maxCursors || o != maxCursors {
		t.Fatalf("after many saves: %d cursors and %d in order, want %d each", n, o, maxCursors)
	}
}
